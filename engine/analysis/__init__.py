"""Pure figures over recorded numbers, each defined once: the speedup (`speedup`), ratios of means with Welch's test
(`compare`), the break-even model (`breakeven`), a run's fit (`fit`), regret against the best fixed arm (`regret`),
intervals and drift (`stats`), a serving engine's cost per pass (`pass_cost`), the per-prompt oracle (`oracle`), a
hybrid drafter's passes by source (`sources`), what a served run's prefix cache did (`prefix`), and a served or load
run's per-mode throughput, TTFT, TPOT and percentiles, and its steps over time (`load`); a load sweep as one
picture with its frontier and the best setting at each load (`sweeps`), the PyTorch HUD's regression rule
(`regressions`), a fleet simulated from one replica's measured tables (`fleet_plan`) and a fleet as measured, its
replicas' load and hit rate over time (`fleet`).
"""
