"""Re-grade bundles: one self-describing archive of an experiment's graded implementations,
problems and results (``docs/bundles.md``), its checks, and ``mkb regrade``'s re-grading."""
