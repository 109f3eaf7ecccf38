"""Tests of ``rexmle prepare`` (downloads, extraction, per-competition preparers)."""
