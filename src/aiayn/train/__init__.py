"""Training (paper §5): label-smoothed loss, the warm-up schedule, the loop, checkpoints (averaging: aiayn.averaging).

Names are imported lazily (PEP 562) so `aiayn.cli.train` loads without torch (fast `aiayn --help`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiayn._lazy import lazy_exports

_EXPORTS = {  # submodule -> the names it gives the package
    "trainer": ("train", "Trainer"),
    "runtime": ("TrainingError",),
    "loss": ("label_smoothed_nll",),
    "schedule": ("noam_lr", "noam_scheduler"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from aiayn.train.loss import label_smoothed_nll
    from aiayn.train.runtime import TrainingError
    from aiayn.train.schedule import noam_lr, noam_scheduler
    from aiayn.train.trainer import Trainer, train
