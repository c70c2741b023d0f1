"""The chaos run (#41): a seeded fault schedule over the real stack, then exact checks.

``python -m tests.chaos.run --minutes N --seed S`` (or ``scripts/chaos.sh``); see ``run.py``.
"""
