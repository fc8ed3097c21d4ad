"""Training (paper §5): label-smoothed loss, the warm-up schedule, the loop, checkpoints, averaging."""

from aiayn.train.loss import label_smoothed_nll
from aiayn.train.schedule import noam_lr, noam_scheduler
from aiayn.train.trainer import Trainer, TrainingError, train

__all__ = ["train", "Trainer", "TrainingError", "label_smoothed_nll", "noam_lr", "noam_scheduler"]
