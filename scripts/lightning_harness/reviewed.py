"""The reviewed lists of scripts/lightning_tests.py (test id without parameters -> reason).

``NOT_APPLICABLE``: tests that reach into Lightning's internals (its loop and connector objects, private
attributes and functions, mocks of its device detection, patches of names inside its modules). They are left
out of the fair-test count. Each entry was read against the test: a test of public behaviour that fails is never
here. ``python scripts/lightning_tests.py ... --suggest`` writes candidates for a new Lightning version.

``KEPT``: tests of public behaviour where core differs on purpose; they stay in the count as failures, and
docs/migrating-from-lightning.md says why.
"""

KEPT: dict[str, str] = {}

NOT_APPLICABLE: dict[str, str] = {}
