"""How a gateway run's record lands in ``run.json`` and in JUnit properties.

Why a separate step: a runtime (local, Docker, a Slurm node) closes its gateway run and hands the record
back in ``RunOutcome.details["gateway"]``; the harness then writes the same fields whatever the runtime.
"""

from __future__ import annotations

from typing import Any

#: run.json keys taken from a gateway record
RUN_JSON_KEYS = ("usage", "egress", "budget_exhausted", "budget", "budget_spent", "provider_tools", "validations")
#: usage totals reported as JUnit properties ``usage.<key>``
JUNIT_KEYS = ("requests", "input_tokens", "output_tokens", "cached_tokens", "model_seconds", "cost_usd")


def run_json_fields(record: dict[str, Any] | None) -> dict[str, Any]:
    """The run.json fields of a gateway record (nothing when the run had no gateway)."""
    if not isinstance(record, dict):
        return {}
    fields = {k: record[k] for k in RUN_JSON_KEYS if k in record}
    if record.get("calls"):
        fields["model_calls"] = "logs/model-calls.jsonl"
    if record.get("errors"):
        fields["gateway_errors"] = record["errors"]
    return fields


def junit_properties(usage: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """``usage.requests``, ``usage.input_tokens``, ... of a gateway-metered run (empty otherwise)."""
    if not isinstance(usage, dict) or usage.get("source") != "gateway":
        return []
    props = [(f"usage.{k}", usage.get(k)) for k in JUNIT_KEYS]
    if usage.get("cost_usd") is None and usage.get("cost_unknown_reason"):
        props.append(("usage.cost_unknown_reason", usage["cost_unknown_reason"]))
    return props
