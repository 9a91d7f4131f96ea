"""Experiments made elsewhere, written into the store: public MetaKernelBench runs
(:mod:`engine.imports.mkb_run`), Harbor jobs (:mod:`engine.imports.harbor_job`) and the
shared record writer (:mod:`engine.imports.records`)."""
