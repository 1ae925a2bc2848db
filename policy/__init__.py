"""Speculation policy: pure decision rules, the Ray actor that applies them, a fleet simulator."""
