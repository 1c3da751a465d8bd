"""Live sessions: a declared comparison, observations appended as a run goes, decisions at checkpoints."""
