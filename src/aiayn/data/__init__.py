"""Data: corpora, joint BPE, encoded arrays on disk, token-budget batching."""
