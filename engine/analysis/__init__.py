"""Pure analysis over recorded numbers: the break-even model, Welch's test, regret, a run's fit."""
