"""The agent's own account of a run, from the log it keeps, as ATIF trajectories *reported by the agent*.

Why: the gateway sees the model calls, not what the agent made of them — which shell command a tool call
ran, what it printed, which AIDE node a piece of code was and what metric it claimed. The CLIs and
scaffolds keep that in their own logs (Claude Code's session transcript, Codex's rollout, Gemini CLI's
chat session, mini-swe-agent's trajectory, AIDE's and ML-Master's journal), which the adapters copy into
``<run>/logs/<agent>/``. Each one found becomes an ATIF trajectory of its own, embedded in the run's
``trajectory.atif.json`` as a sub-agent trajectory marked ``extra.reported_by = "agent"``: the agent's
claims, shown beside — never mixed into — the steps and totals the gateway observed.

Everything here was written by the agent under test, so it is read as hostile input: files are found
with a bounded walk that never follows a link, read through :mod:`pytest_rexmle.agent_output` with size caps
(a FIFO, a device, a 1 GB sparse file or a link out of the run folder is skipped with a note), JSON is
parsed with bounded depth, a malformed line is skipped and counted, long texts are cut, and the whole
reading stops at a step and a time budget.

One small function per format, registered in :data:`AGENT_LOGS` by agent name.
"""

from __future__ import annotations

import json
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent_output import RefusedFile, kind_of, load_json, open_reader, read_json, walk_files

#: caps: one JSON file read whole, one JSON-lines file, one line of it, one text kept in a step
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_JSONL_BYTES = 256 * 1024 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_TEXT_CHARS = 20_000
#: steps kept per trajectory, log files read per agent, seconds spent on one run's logs
MAX_STEPS = 5_000
MAX_FILES = 20
READ_SECONDS = 30.0
#: the log folder's walk: deeper or larger folders are not searched further
WALK_DEPTH = 16
WALK_ENTRIES = 20_000


class Budget:
    """The time the reading of one run's agent logs may take; checked between lines and steps."""

    def __init__(self, seconds: float = READ_SECONDS) -> None:
        self.deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self.deadline


@dataclass
class Parsed:
    """What one log file gave: ATIF steps (without ids yet) and what the agent says about itself."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    version: str | None = None
    model: str | None = None
    skipped_lines: int = 0
    cut: bool = False
    session_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, step: dict[str, Any]) -> dict[str, Any] | None:
        if len(self.steps) >= MAX_STEPS:
            self.cut = True
            return None
        self.steps.append(step)
        return step


# -- reading -----------------------------------------------------------------------------------------------
def text(value: Any) -> str:
    """Agent text as a string, cut at MAX_TEXT_CHARS (a marker says how much was left out)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    if len(value) > MAX_TEXT_CHARS:
        return value[:MAX_TEXT_CHARS] + f"… [{len(value) - MAX_TEXT_CHARS} characters cut by the harness]"
    return value


def json_lines(path: Path, parsed: Parsed, budget: Budget) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines log, read through a capped handle; a line that is not a JSON
    object (malformed, too deep, not UTF-8, longer than MAX_LINE_BYTES) is skipped and counted."""
    with open_reader(path, MAX_JSONL_BYTES) as handle:
        while not budget.spent() and not parsed.cut:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES:
                parsed.skipped_lines += 1
                while line and not line.endswith(b"\n") and not budget.spent():  # the rest of the long line
                    line = handle.readline(MAX_LINE_BYTES)
                continue
            if not line.strip():
                continue
            try:
                value = load_json(line, path.name)
            except RefusedFile:
                parsed.skipped_lines += 1
                continue
            if isinstance(value, dict):
                yield value
            else:
                parsed.skipped_lines += 1
        parsed.cut = True


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15 else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value < 1e9 else None


def _timestamp(value: Any) -> str | None:
    if isinstance(value, str) and len(value) <= 64:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(value)) + f".{int(value % 1 * 1000):03d}Z"
    return None


def _metrics(prompt: Any, completion: Any, cached: Any = None, cost: Any = None) -> dict[str, Any] | None:
    values = {"prompt_tokens": _int(prompt), "completion_tokens": _int(completion), "cached_tokens": _int(cached),
              "cost_usd": _number(cost)}
    values = {k: v for k, v in values.items() if v is not None}
    return values or None


def _arguments(value: Any) -> Any:
    """A tool call's arguments as the log gives them: a JSON string is decoded when it is an object."""
    if isinstance(value, str):
        try:
            decoded = load_json(value.encode("utf-8", "replace"), "arguments")
        except RefusedFile:
            return {"input": text(value)}
        return decoded if isinstance(decoded, (dict, list)) else {"input": text(value)}
    if isinstance(value, (dict, list)):
        return value
    return {"input": text(value)}


def _observe(step: dict[str, Any], call_id: str, content: Any) -> None:
    step.setdefault("observation", {"results": []})["results"].append(
        {"source_call_id": call_id, "content": text(content)})


class _Calls:
    """Which agent step made which tool call, to hang each result on the step that asked for it."""

    def __init__(self) -> None:
        self.owner: dict[str, dict[str, Any]] = {}

    def call(self, step: dict[str, Any], call_id: Any, name: Any, arguments: Any) -> None:
        call_id = str(call_id) if call_id else f"call-{len(self.owner) + 1}"
        if call_id in self.owner:
            return
        step.setdefault("tool_calls", []).append({"tool_call_id": call_id, "function_name": text(name) or "?",
                                                  "arguments": _arguments(arguments)})
        self.owner[call_id] = step

    def result(self, parsed: Parsed, call_id: Any, content: Any, timestamp: Any = None) -> None:
        owner = self.owner.get(str(call_id))
        if owner is not None:
            _observe(owner, str(call_id), content)
        elif content:
            parsed.add({"source": "user", "message": text(content), "timestamp": _timestamp(timestamp),
                        "extra": {"tool_result_for": text(call_id)}})


# -- Claude Code: session transcript (config/projects/**/*.jsonl) or stream-json (stdout.jsonl) ------------
def claude_code(path: Path, budget: Budget) -> Parsed:
    """Claude Code's ``user``/``assistant`` events: one API answer may span several lines that share its
    message id (one per content block), each repeating the answer's usage; tool results come back as a
    user line's ``tool_result`` blocks."""
    parsed, calls = Parsed(), _Calls()
    answers: dict[str, dict[str, Any]] = {}
    for event in json_lines(path, parsed, budget):
        kind, message = event.get("type"), _dict(event.get("message"))
        parsed.version = parsed.version or (text(event["version"]) if isinstance(event.get("version"), str) else None)
        parsed.session_id = parsed.session_id or (text(event.get("sessionId") or event.get("session_id")) or None)
        if kind == "result":
            parsed.extra["result"] = {k: event.get(k) for k in ("subtype", "num_turns", "total_cost_usd", "is_error")
                                      if k in event}
        if kind not in ("user", "assistant") or not message:
            continue
        stamp, content = _timestamp(event.get("timestamp")), message.get("content")
        if kind == "assistant":
            step = _claude_answer(parsed, answers, event, message, stamp)
            if step is None:
                break
            _claude_blocks(step, content, calls)
        else:
            _claude_user(parsed, calls, event, content, stamp)
    return parsed


def _claude_answer(parsed: Parsed, answers: dict[str, dict[str, Any]], event: dict[str, Any],
                   message: dict[str, Any], stamp: str | None) -> dict[str, Any] | None:
    """The agent step of the API answer this line belongs to (started at its first line, with the answer's
    usage); None once the step limit is reached."""
    key = str(message.get("id") or event.get("uuid") or len(parsed.steps))
    step = answers.get(key)
    if step is not None:
        return step
    usage = _dict(message.get("usage"))
    read, made = _int(usage.get("cache_read_input_tokens")) or 0, _int(usage.get("cache_creation_input_tokens")) or 0
    prompt = _int(usage.get("input_tokens"))
    step = parsed.add({"source": "agent", "timestamp": stamp, "message": "",
                       "model_name": text(message.get("model")) or None,
                       "metrics": _metrics(None if prompt is None else prompt + read + made,
                                           usage.get("output_tokens"), read if usage else None),
                       "extra": {"message_id": key, **({"sidechain": True} if event.get("isSidechain") else {})}})
    if step is not None:
        answers[key] = step
        parsed.model = parsed.model or step["model_name"]
    return step


def _claude_blocks(step: dict[str, Any], content: Any, calls: _Calls) -> None:
    """An assistant line's text, thinking and tool-use blocks, added to its answer's step."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)
    for block in map(_dict, blocks):
        if block.get("type") == "text":
            step["message"] = "\n".join(filter(None, [step["message"], text(block.get("text"))]))
        elif block.get("type") == "thinking":
            step["reasoning_content"] = "\n".join(filter(None, [step.get("reasoning_content"),
                                                                text(block.get("thinking"))]))
        elif block.get("type") == "tool_use":
            calls.call(step, block.get("id"), block.get("name"), block.get("input"))


def _claude_user(parsed: Parsed, calls: _Calls, event: dict[str, Any], content: Any, stamp: str | None) -> None:
    """A user line: its words as a user step, its ``tool_result`` blocks hung on the steps that called."""
    if isinstance(content, str):
        parsed.add({"source": "user", "message": text(content), "timestamp": stamp})
        return
    words = []
    for block in map(_dict, _list(content)):
        if block.get("type") == "tool_result":
            calls.result(parsed, block.get("tool_use_id"), block.get("content"), event.get("timestamp"))
        elif block.get("type") == "text":
            words.append(text(block.get("text")))
    if words:
        parsed.add({"source": "user", "message": text("\n".join(words)), "timestamp": stamp})


# -- Codex: the session rollout (home/sessions/**/rollout-*.jsonl) ------------------------------------------
def codex(path: Path, budget: Budget) -> Parsed:
    """Codex's rollout: ``response_item`` lines are the conversation in Responses-API items (messages,
    reasoning, function and custom tool calls and their outputs); a ``token_usage_record`` line (0.169)
    or else an ``event_msg`` ``token_count`` line carries the last answer's usage, possibly after its
    tool outputs. Consecutive model items until the next input form one agent step."""
    parsed, calls = Parsed(), _Calls()
    current: dict[str, Any] | None = None
    answered: dict[str, Any] | None = None  # the last agent step, which the next usage line is about
    model = None
    for line in json_lines(path, parsed, budget):
        kind, payload, stamp = line.get("type"), _dict(line.get("payload")), _timestamp(line.get("timestamp"))
        if kind == "session_meta":
            parsed.version = text(payload.get("cli_version")) or None
            parsed.session_id = text(payload.get("id")) or None
        elif kind == "turn_context":
            model = text(payload.get("model")) or model
            parsed.model = parsed.model or model
        elif kind == "token_usage_record" or (kind == "event_msg" and payload.get("type") == "token_count"):
            last = _dict(payload.get("usage")) if kind == "token_usage_record" else \
                _dict(_dict(payload.get("info")).get("last_token_usage"))
            if last and answered is not None and not answered.get("metrics"):
                answered["metrics"] = _metrics(last.get("input_tokens"), last.get("output_tokens"),
                                               last.get("cached_input_tokens"))
        if kind != "response_item":
            continue
        item = payload.get("type")
        if item == "message" and payload.get("role") in ("user", "developer", "system"):
            current = None
            words = [text(_dict(c).get("text")) for c in _list(payload.get("content"))]
            parsed.add({"source": "user" if payload.get("role") == "user" else "system",
                        "message": text("\n".join(filter(None, words))), "timestamp": stamp})
        elif item in ("message", "reasoning", "function_call", "custom_tool_call", "local_shell_call"):
            if current is None:
                current = answered = parsed.add({"source": "agent", "timestamp": stamp, "message": "",
                                                 "model_name": model})
                if current is None:
                    break
            if item == "message":
                words = [text(_dict(c).get("text")) for c in _list(payload.get("content"))]
                current["message"] = "\n".join(filter(None, [current["message"], *words]))
            elif item == "reasoning":
                parts = _list(payload.get("summary")) + _list(payload.get("content"))
                words = [text(_dict(part).get("text")) for part in parts]
                current["reasoning_content"] = "\n".join(filter(None, [current.get("reasoning_content"), *words]))
            else:
                calls.call(current, payload.get("call_id") or payload.get("id"), payload.get("name") or "local_shell",
                           payload.get("arguments", payload.get("input", payload.get("action"))))
        elif item in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            current = None
            output = payload.get("output")
            calls.result(parsed, payload.get("call_id"), output.get("content", output)
                         if isinstance(output, dict) else output, line.get("timestamp"))
    return parsed


# -- Gemini CLI: the chat session (home/.gemini/tmp/*/chats/session-*.json or .jsonl) ------------------------
def gemini_cli(path: Path, budget: Budget) -> Parsed:
    """Gemini CLI's chat: a record per message (``user``, ``gemini``, ``info``/``error``), a message
    rewritten under the same id as it completes (the last version counts), ``$set`` lines that update
    the session; older versions write one JSON document with a ``messages`` list. A ``gemini`` message
    carries its tool calls with their results, its thoughts and its tokens."""
    parsed = Parsed()
    messages: dict[str, dict[str, Any]] = {}
    if path.suffix == ".json":
        document = _dict(read_json(path, MAX_JSON_BYTES))
        records: Iterator[dict[str, Any]] | list[Any] = [document, *_list(document.get("messages"))]
    else:
        records = json_lines(path, parsed, budget)
    for record in map(_dict, records):
        parsed.session_id = parsed.session_id or (text(record["sessionId"]) if record.get("sessionId") else None)
        for message in map(_dict, [record, *_list(_dict(record.get("$set")).get("messages"))]):
            if message.get("type") in ("user", "gemini", "info", "error", "warning") and message.get("id"):
                messages[str(message["id"])] = message
    for message in messages.values():
        if budget.spent() or len(parsed.steps) >= MAX_STEPS:
            parsed.cut = True
            break
        kind, stamp, content = message.get("type"), _timestamp(message.get("timestamp")), message.get("content")
        parts = [{"text": content}] if isinstance(content, str) else [_dict(p) for p in _list(content)]
        words = text("\n".join(text(p.get("text")) for p in parts if "text" in p))
        if kind == "user":
            if words:  # a user record holding only function responses repeats the tool calls' results
                parsed.add({"source": "user", "message": words, "timestamp": stamp})
            continue
        if kind != "gemini":
            parsed.add({"source": "system", "message": words, "timestamp": stamp, "extra": {"kind": text(kind)}})
            continue
        tokens = _dict(message.get("tokens"))
        thoughts = [f"{text(_dict(t).get('subject'))}: {text(_dict(t).get('description'))}"
                    for t in _list(message.get("thoughts"))]
        step: dict[str, Any] = {"source": "agent", "timestamp": stamp, "message": words,
                                "model_name": text(message.get("model")) or None,
                                "metrics": _metrics(tokens.get("input"), tokens.get("output"), tokens.get("cached"))}
        if thoughts:
            step["reasoning_content"] = text("\n".join(thoughts))
        parsed.model = parsed.model or step["model_name"]
        calls = _Calls()
        for call in map(_dict, _list(message.get("toolCalls"))):
            calls.call(step, call.get("id"), call.get("name"), call.get("args"))
            results = [_dict(_dict(r).get("functionResponse")).get("response") for r in _list(call.get("result"))]
            if results or call.get("resultDisplay"):
                calls.result(parsed, call.get("id"), results[0] if len(results) == 1 else
                             (results or call.get("resultDisplay")))
        parsed.add(step)
    return parsed


# -- mini-swe-agent: trajectory.json ------------------------------------------------------------------------
_BASH_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)\n```", re.DOTALL)


def mini_swe_agent(path: Path, budget: Budget) -> Parsed:
    """mini-swe-agent's saved chat (``messages``, ``info``): assistant messages with their tool calls and
    the LiteLLM response (usage, cost) under ``extra``; a ``tool`` message is a call's result. The older
    text format's action is the answer's bash block, and the next user message is its output."""
    parsed, calls = Parsed(), _Calls()
    document = _dict(read_json(path, MAX_JSON_BYTES))
    info = _dict(document.get("info"))
    parsed.version = text(info.get("mini_version")) or None
    parsed.extra = {k: info[k] for k in ("exit_status", "model_stats") if k in info}
    pending: str | None = None
    for message in map(_dict, _list(document.get("messages"))):
        if budget.spent() or parsed.cut:
            parsed.cut = True
            break
        role, extra = message.get("role"), _dict(message.get("extra"))
        stamp = _timestamp(extra.get("timestamp"))
        if role == "assistant":
            response = _dict(extra.get("response"))
            usage = _dict(response.get("usage"))
            details = _dict(usage.get("prompt_tokens_details"))
            step = parsed.add({"source": "agent", "timestamp": stamp, "message": text(message.get("content")),
                               "model_name": text(response.get("model")) or None,
                               "metrics": _metrics(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                                                   details.get("cached_tokens"), extra.get("cost"))})
            if step is None:
                break
            parsed.model = parsed.model or step["model_name"]
            for call in map(_dict, _list(message.get("tool_calls"))):
                function = _dict(call.get("function"))
                calls.call(step, call.get("id"), function.get("name"), function.get("arguments"))
            pending = None
            if not message.get("tool_calls"):
                block = _BASH_BLOCK.search(str(message.get("content") or ""))
                if block:
                    pending = f"bash-{len(parsed.steps)}"
                    calls.call(step, pending, "bash", {"command": text(block.group(1))})
        elif role == "tool":
            calls.result(parsed, message.get("tool_call_id"), message.get("content"), extra.get("timestamp"))
        elif role == "user" and pending:
            calls.result(parsed, pending, message.get("content"))
            pending = None
        else:
            parsed.add({"source": "user" if role == "user" else "system", "timestamp": stamp,
                        "message": text(message.get("content")) or text(extra.get("exit_status")),
                        **({"extra": {"role": text(role)}} if role not in ("user", "system") else {})})
    return parsed


# -- AIDE (and ML-Master, its descendant): the search journal (logs/<exp>/journal.json) ----------------------
def aide_journal(path: Path, budget: Budget) -> Parsed:
    """AIDE's journal: one node per solution it drafted, debugged or improved — the plan, the code it ran,
    the terminal output, its own analysis and the metric it claims. Each node is an agent step whose tool
    call is the code's execution and whose observation is the output."""
    parsed = Parsed()
    document = _dict(read_json(path, MAX_JSON_BYTES))
    parents = _dict(document.get("node2parent"))
    nodes = [_dict(n) for n in _list(document.get("nodes"))]
    nodes.sort(key=lambda n: step if (step := _int(n.get("step"))) is not None else 10**9)
    for number, node in enumerate(nodes, 1):
        if budget.spent():
            parsed.cut = True
            break
        node_id = text(node.get("id")) or f"node-{number}"
        metric = _dict(node.get("metric"))
        output = node.get("_term_out")
        output = "".join(map(text, output)) if isinstance(output, list) else output
        step = parsed.add({"source": "agent", "timestamp": _timestamp(node.get("ctime")),
                           "message": text(node.get("plan")),
                           "tool_calls": [{"tool_call_id": node_id, "function_name": "execute_code",
                                           "arguments": {"code": text(node.get("code"))}}],
                           "observation": {"results": [{"source_call_id": node_id, "content": text(output)}]},
                           "extra": {"node": node_id, "parent": text(parents.get(node_id)) or None,
                                     "analysis": text(node.get("analysis")) or None,
                                     "metric": _number(metric.get("value")) if metric.get("value") is not None
                                     else None, "is_buggy": node.get("is_buggy") is True,
                                     "exec_time_s": _number(node.get("exec_time")),
                                     "exc_type": text(node.get("exc_type")) or None}})
        if step is None:
            break
    return parsed


@dataclass(frozen=True)
class LogFormat:
    """Where an agent keeps one kind of log (a pattern relative to ``<run>/logs/<agent>/``) and its reader.
    ``fallback``: read only when no earlier format of the agent gave a trajectory."""

    pattern: str
    read: Callable[[Path, Budget], Parsed]
    fallback: bool = False


#: agent name -> its log formats, in order of preference
AGENT_LOGS: dict[str, tuple[LogFormat, ...]] = {
    "claude-code": (LogFormat("claude-code/config/projects/**/*.jsonl", claude_code),
                    LogFormat("claude-code/stdout.jsonl", claude_code, fallback=True)),
    "codex": (LogFormat("codex/home/sessions/**/rollout-*.jsonl", codex),),
    "gemini-cli": (LogFormat("gemini-cli/home/.gemini/**/session-*.json*", gemini_cli),),
    "mini-swe-agent": (LogFormat("mini-swe-agent/trajectory.json", mini_swe_agent),),
    "aide": (LogFormat("logs/*/journal.json", aide_journal),),
    "ml-master": (LogFormat("logs/**/journal.json", aide_journal),),
}


def _pattern(glob: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(?:[^/]+/)*", i + 3
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(out + r"\Z")


def _find(root: Path, formats: tuple[LogFormat, ...], notes: list[dict[str, Any]]) -> list[tuple[LogFormat, str]]:
    """(format, path relative to ``root``) of each log file, in the formats' order; what matches a
    pattern but is no regular file (a link, a FIFO, a device) is noted, never opened."""
    compiled = [(f, _pattern(f.pattern)) for f in formats]
    found: list[tuple[int, str, LogFormat]] = []
    try:
        for rel, st in walk_files(root, max_depth=WALK_DEPTH, max_entries=WALK_ENTRIES, what="the agent's logs"):
            for order, (fmt, pattern) in enumerate(compiled):
                if pattern.match(rel):
                    if stat.S_ISREG(st.st_mode):
                        found.append((order, rel, fmt))
                    elif not stat.S_ISDIR(st.st_mode):
                        _skip(notes, rel, f"{kind_of(st.st_mode)}, not a regular file")
                    break
    except RefusedFile as exc:
        notes.append({"source_file": ".", "status": "incomplete", "reason": str(exc)})
    found.sort(key=lambda item: (item[0], item[1]))
    return [(fmt, rel) for _, rel, fmt in found]


def agent_trajectories(run_dir: Path, agent: str, seconds: float = READ_SECONDS) -> tuple[list[dict], list[dict]]:
    """(ATIF trajectories the agent's own logs give, a note per log file: embedded or skipped and why)."""
    from .atif import AtifTrajectory  # report.atif imports this module at its top

    formats = AGENT_LOGS.get(agent)
    root = Path(run_dir) / "logs" / agent
    if not formats or not root.is_dir() or root.is_symlink():
        return [], []
    budget = Budget(seconds)
    trajectories: list[dict] = []
    notes: list[dict[str, Any]] = []
    found = _find(root, formats, notes)
    for fmt, rel in found[:MAX_FILES]:
        if fmt.fallback and trajectories:
            continue
        source = f"logs/{agent}/{rel}"
        if budget.spent():
            _skip(notes, source, "the time for reading agent logs ran out")
            continue
        try:
            parsed = fmt.read(root / rel, budget)
        except (RefusedFile, OSError) as exc:
            _skip(notes, source, text(str(exc)))
            continue
        except Exception as exc:  # a shape no reader foresaw: that log is lost, never the run's trajectory
            _skip(notes, source, f"could not be read as {agent}'s log ({type(exc).__name__})")
            continue
        if not parsed.steps:
            _skip(notes, source, "no steps in it", skipped_lines=parsed.skipped_lines)
            continue
        document = _trajectory(agent, source, parsed, len(trajectories) + 1)
        try:
            trajectories.append(AtifTrajectory.model_validate(document).model_dump(mode="json", exclude_none=True))
        except ValueError as exc:
            _skip(notes, source, f"not valid ATIF: {text(str(exc))[:300]}")
            continue
        notes.append({"source_file": source, "status": "embedded", "steps": len(parsed.steps),
                      "skipped_lines": parsed.skipped_lines, "cut": parsed.cut,
                      "trajectory_id": document["trajectory_id"]})
    if len(found) > MAX_FILES:
        _skip(notes, f"logs/{agent}", f"{len(found) - MAX_FILES} more log files than the {MAX_FILES} read")
    return trajectories, notes


def _skip(notes: list[dict[str, Any]], source: str, reason: str, **more: Any) -> None:
    notes.append({"source_file": source, "status": "skipped", "reason": reason, **more})


def _trajectory(agent: str, source: str, parsed: Parsed, number: int) -> dict[str, Any]:
    for step_id, step in enumerate(parsed.steps, 1):
        step["step_id"] = step_id
        for key in [k for k, v in step.items() if v is None]:
            del step[key]
    metrics = [s["metrics"] for s in parsed.steps if s.get("metrics")]

    def total(key: str) -> int | float | None:
        values = [m[key] for m in metrics if key in m]
        return sum(values) if values else None

    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(source).stem)[:80]
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": parsed.session_id,
        "trajectory_id": f"agent-log-{number}-{agent}-{stem}",
        "agent": {"name": agent, "version": parsed.version or "unknown",
                  **({"model_name": parsed.model} if parsed.model else {})},
        "steps": parsed.steps,
        "notes": (f"Reported by the agent: read from its own log {source}, not observed by the harness; "
                  f"{parsed.skipped_lines} malformed line(s) skipped" + ("; cut at the harness's bounds" if parsed.cut
                                                                          else "") + "."),
        "final_metrics": {"total_prompt_tokens": total("prompt_tokens"),
                          "total_completion_tokens": total("completion_tokens"),
                          "total_cached_tokens": total("cached_tokens"), "total_cost_usd": total("cost_usd"),
                          "total_steps": len(parsed.steps), "extra": {"reported_by": "agent"}},
        "extra": {"reported_by": "agent", "source_file": source, "skipped_lines": parsed.skipped_lines,
                  "cut": parsed.cut, **({"agent_says": parsed.extra} if parsed.extra else {})},
    }
