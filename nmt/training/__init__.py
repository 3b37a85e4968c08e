"""The training run: settings checks, subwords, the loop, validation (with the AER learning curve on a gold set), state and resume, schedules, loss, moving average, averaging, the final evaluation.

May import: every other subpackage and nmt.settings (it is the last stage).
"""
