"""Results from anywhere (issue 69): what users already measure with the field's own tools, on their own hardware,
becomes Phoenix runs on the same pages. Each format is one module with one verb, ``parse(docs) -> [Level]``
(engine.imports.vllm_bench for `vllm bench serve --save-result --save-detailed`); engine.imports.importer reads a
file bounded in size, detects its format, recomputes the figures with Phoenix's one definition of each
(engine.engines.arrivals.figures) beside the tool's own, and stores every level as a run, all or nothing."""
