"""inferlane's engine, laid out as the data flows: intake, scheduling, execution,
delivery, then models, drift, rollout, jobs, ops and the demo; the ``Worker`` facade,
its launcher, the settings and the CLI on top (README, "Layout")."""
