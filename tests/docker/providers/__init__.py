"""Scripted loopback stand-ins for the model providers the coding CLIs speak to (one module per protocol)."""
