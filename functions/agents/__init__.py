"""System agents: each a short, bounded sweep run on a schedule, safe to run twice at once."""
