"""Grading: what a trajectory is worth (rewards, exact step advantages, written answers, scoring)."""
