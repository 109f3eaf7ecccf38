"""The ``llm`` judge: any OpenAI-compatible chat-completions endpoint, with the paper's rubric.

Prompt (the paper's protocol in the project's wording, ``PROMPT_VERSION``): a system instruction making the model an
adjudicator that scores 1 only for explicit evidence of execution, and a user message of the 13
``TARGET STRATEGY`` blocks (names and criteria verbatim from ``strategies.json``) followed by one log
section of at most 15 000 characters of the run's observed trace (:mod:`pytest_rexmle.capability.trace`).
Replies must be raw JSON (``response_format: json_object``); unparsable replies are retried a bounded number
of times, then the section scores 0 with evidence ``"Unparsable judge response"`` and is flagged
(:mod:`.schema`). Transient HTTP failures (429, 5xx, network) are retried the same way; configuration
failures (401/403/404) raise :class:`JudgeError` at once.

Options (``get_judge("llm", **options)``; strings are accepted for every option, as from a CLI):

* ``base_url`` — default ``https://api.openai.com/v1`` (``--rexmle-judge-option base_url=...``); requests go
  to ``<base_url>/chat/completions``.
* ``model`` — default ``gpt-5``, the paper's judge (``--rexmle-judge-model``).
* ``api_key_env`` — the *name* of the environment variable holding the key (default
  ``REXMLE_JUDGE_API_KEY``, falling back to ``OPENAI_API_KEY``). The key itself is never an option, is
  only placed in the ``Authorization`` header, and is never written to any document or message; a
  server that needs no key (a local vLLM) works with the variable unset.
* ``params`` — a dict or JSON object of extra request fields (e.g. ``{"temperature": 0}``), recorded.
* ``max_attempts`` (3), ``timeout`` (120 s), ``backoff`` (2 s, doubled per retry), ``section_chars``
  (15 000), ``keep_code`` (false: fenced code blocks are removed), ``json_mode`` (true).
* ``time_limit`` (3600 s) — the clock of one run's capability document, and again of its stages, reading
  included (:mod:`pytest_rexmle.capability.clock`): no request outlives it; past it the run is flagged
  ``judge timed out`` and scores nothing.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..errors import RexmleError
from ..protocols import openai_chat
from .base import JUDGED_STAGES, Judge
from .clock import Clock, check, time_limit_seconds
from .schema import NO_TRACE_FLAG, UNPARSABLE, normalise_results, untraced, zero_results
from .strategies import load_strategies
from .trace import SECTION_CHARS, Source, split_sections, trace_text

#: 2: the log sections are the observed trace (recorded model calls, file inventory), not the agent's logs
PROMPT_VERSION = "rexmle-capability-2"
STAGE_PROMPT_VERSION = "rexmle-stages-2"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-5"
LLM_SECONDS = 3600.0
DEFAULT_KEY_ENV = "REXMLE_JUDGE_API_KEY"
FALLBACK_KEY_ENV = "OPENAI_API_KEY"
REQUEST_FAILED = "Judge request failed"

_ADJUDICATOR = ("You are an expert adjudicator reviewing the execution log of an autonomous machine-learning agent "
                "that worked on a medical-imaging task. ")
SYSTEM_PROMPT = _ADJUDICATOR + (
    "For each target strategy listed by the user, decide whether this log "
    "section shows explicit evidence that the agent EXECUTED the strategy. Score 1 only with explicit evidence "
    "of execution: code that was run, specific library calls, produced outputs or distinct output files. Score 0 "
    "when the evidence is ambiguous, when the strategy is only planned, suggested or discussed, or when it is "
    "absent. Quote or point to the evidence briefly. Reply with a raw JSON object only (no Markdown, no code "
    "fences) holding a \"results\" list with one object per strategy: "
    "{\"id\": <strategy id>, \"strategy\": <name>, \"score\": 0 or 1, \"evidence\": <short text>}."
)

STAGE_SYSTEM_PROMPT = _ADJUDICATOR + (
    "Grade how far this log section shows the agent carried out each workflow "
    "stage listed by the user: 1 = clearly done, with explicit evidence of execution; 0.5 = partly done; 0 = "
    "absent, only planned, or ambiguous. Reply with a raw JSON object only (no Markdown) holding a \"stages\" "
    "list with one object per stage: {\"id\": \"S1\", \"score\": 0 | 0.5 | 1, \"evidence\": <short text>}."
)


class JudgeError(RexmleError):
    """The judge cannot work as configured (bad endpoint, rejected key); never carries the key."""


def user_message(label: str, section: str) -> str:
    blocks = "\n\n".join(f"TARGET STRATEGY: {s.name}\n{s.criteria}" for s in load_strategies())
    ids = ", ".join(f"{s.id} = {s.name}" for s in load_strategies())
    return (f"{blocks}\n\nLog section ({label}):\n{section}\n"
            f"Return a JSON object with key \"results\" containing one object per strategy ({ids}), each with "
            f"\"id\", \"strategy\", \"score\" (0 or 1) and \"evidence\".")


def stage_message(label: str, section: str) -> str:
    stages = "\n".join(f"{sid} ({name}): {text}" for sid, (name, text) in JUDGED_STAGES.items())
    return (f"{stages}\n\nLog section ({label}):\n{section}\n"
            f"Return a JSON object with key \"stages\" containing one object per stage (S1, S2, S3).")


_FENCED = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_reply(content: Any, key: str) -> list | None:
    """The ``key`` list of a JSON reply (a stray Markdown fence is tolerated), or None if unusable."""
    if not isinstance(content, str):
        return None
    match = _FENCED.match(content)
    text = match.group(1) if match else content.strip()
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        return None
    return data[key]


def _as_bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


def _public_url(url: str) -> str:
    """The endpoint without any user:password part, for the stored judge record."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class LLMJudge(Judge):
    name = "llm"

    def __init__(self, *, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                 params: dict | str | None = None, max_attempts: int | str = 3, timeout: float | str = 120,
                 backoff: float | str = 2.0, section_chars: int | str = SECTION_CHARS, keep_code: bool | str = False,
                 json_mode: bool | str = True, time_limit: float | str = LLM_SECONDS) -> None:
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.model = model or DEFAULT_MODEL
        self.api_key_env = api_key_env or (DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV) or not
                                           os.environ.get(FALLBACK_KEY_ENV) else FALLBACK_KEY_ENV)
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                raise JudgeError("judge option params must be a JSON object") from None
        if params is not None and not isinstance(params, dict):
            raise JudgeError("judge option params must be a JSON object")
        self.params = dict(params or {})
        self.max_attempts = max(1, int(max_attempts))
        self.timeout = float(timeout)
        self.backoff = float(backoff)
        self.section_chars = int(section_chars)
        self.keep_code = _as_bool(keep_code)
        self.json_mode = _as_bool(json_mode)
        self.time_limit = time_limit_seconds(time_limit)
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self._run_start = dict(self.usage)

    def __repr__(self) -> str:  # never show the key, only where it comes from
        return f"LLMJudge(model={self.model!r}, base_url={_public_url(self.base_url)!r}, api_key_env={self.api_key_env!r})"

    def describe(self) -> dict:
        return {"name": self.name, "model": self.model, "params": dict(self.params), "prompt_version": PROMPT_VERSION,
                "stage_prompt_version": STAGE_PROMPT_VERSION, "base_url": _public_url(self.base_url),
                "api_key_env": self.api_key_env, "section_chars": self.section_chars, "keep_code": self.keep_code}

    def _post(self, messages: list[dict], clock: Clock | None = None) -> str:
        """One chat completion; returns the message content. Raises _Transient or JudgeError."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.params}
        if self.json_mode:
            body.setdefault("response_format", {"type": "json_object"})
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers.update(openai_chat.PROTOCOL.auth_headers(key))
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        check(clock, "asking the judge model")
        timeout = self.timeout if clock is None else max(0.001, min(self.timeout, clock.left()))
        self.usage["requests"] += 1
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                payload = json.loads(response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:
            if exc.code in (408, 409, 429) or exc.code >= 500:
                raise _Transient(f"HTTP {exc.code}") from None
            raise JudgeError(f"judge endpoint {_public_url(self.base_url)} answered HTTP {exc.code} "
                             f"(check the model name and ${self.api_key_env})") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise _Transient(f"network error: {type(exc).__name__}") from None
        except ValueError:
            raise _Transient("response body is not JSON") from None
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if isinstance(usage, dict):
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                if isinstance(usage.get(k), int):
                    self.usage[k] += usage[k]
        return openai_chat.first_content(payload)

    def _ask(self, system: str, user: str, key: str, clock: Clock | None = None) -> tuple[list | None, str | None]:
        """(parsed list, None) or (None, why) after at most ``max_attempts`` tries."""
        why = None
        for attempt in range(self.max_attempts):
            if attempt and self.backoff:
                pause = self.backoff * 2 ** (attempt - 1)
                time.sleep(pause if clock is None else min(pause, clock.left()))
            try:
                content = self._post([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                     clock)
            except _Transient as exc:
                why = f"{REQUEST_FAILED} ({exc})"
                continue
            parsed = parse_reply(content, key)
            if parsed is not None:
                return parsed, None
            why = UNPARSABLE
        return None, why

    def sections(self, sources: list[Source]) -> list[str]:
        return split_sections(trace_text(sources, keep_code=self.keep_code), self.section_chars)

    def judge_sections(self, sources, task_id, ignore, clock=None):
        sections, flags = [], []
        start = self._run_start = dict(self.usage)
        texts = self.sections(sources)
        if not texts:
            return untraced(task_id), [NO_TRACE_FLAG], self._usage(start)
        for i, text in enumerate(texts, start=1):
            label = f"{task_id}-section-{i}"
            raw, why = self._ask(SYSTEM_PROMPT, user_message(label, text), "results", clock)
            if raw is None:
                sections.append({"label": label, "flagged": True, "results": zero_results(UNPARSABLE)})
                flags.append(f"{'unparsable' if why == UNPARSABLE else 'request failed'}: {label}")
            else:
                sections.append({"label": label, "flagged": False, "results": normalise_results(raw)})
        return sections, flags, self._usage(start)

    def judge_stages(self, sources, task_id, ignore, clock=None):
        best = {sid: {"score": 0.0, "evidence": ""} for sid in JUDGED_STAGES}
        for i, text in enumerate(self.sections(sources), start=1):
            label = f"{task_id}-section-{i}"
            raw, _ = self._ask(STAGE_SYSTEM_PROMPT, stage_message(label, text), "stages", clock)
            for item in raw or []:
                if not isinstance(item, dict) or item.get("id") not in best:
                    continue
                score = _stage_score(item.get("score"))
                if score > best[item["id"]]["score"]:
                    evidence = item.get("evidence")
                    best[item["id"]] = {"score": score, "evidence": f"{label}: {evidence if isinstance(evidence, str) else ''}"}
        return best

    def spent_so_far(self) -> dict:
        return self._usage(self._run_start)

    def _usage(self, start: dict) -> dict:
        """What this run cost the judge (the instance is reused across runs)."""
        return {k: v - start.get(k, 0) for k, v in self.usage.items()}


def _stage_score(value: Any) -> float:
    """0, 0.5 or 1 (numbers or numeric strings); anything else counts as 0."""
    if isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number in (0.0, 0.5, 1.0) else 0.0


class _Transient(Exception):
    pass
