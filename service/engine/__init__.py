"""Pure numerics (numpy/scipy only, no I/O): records, coverage, orders, rules, replay,
sufficiency and evaluation statistics, as defined in docs/spec.md."""
