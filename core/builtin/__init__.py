"""The embedded defaults: plugins shipped inside ``core`` and registered through its own entry points.

They are plugins like any other: ``CORE_DISABLE_PLUGINS=cpu`` blocks one, and a distribution that
claims the same alias is reported as a conflict unless one of the two is pinned or blocked.
"""
