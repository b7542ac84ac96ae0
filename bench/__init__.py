"""Tools, not the product: the speed benchmarks, the stand-in engine and the sandbox soak.

Each measures the packages a user imports (``harness``, ``sandboxes``, ``trainers``) and prints figures; none of
those packages imports them. ``python -m bench`` lists them, ``python -m bench NAME ...`` runs one.
"""
