#!/usr/bin/env python3
"""Check this run's submission format through the harness's gateway (no harness code in the sandbox).

Usage: ``python3 validate_client.py [--submission DIR]``. The gateway validates the run's own submission
folder ($REXMLE_SUBMISSION_DIR) against the public test data only, never against answers, and this
script prints its verdict: exit 0 when the submission is valid, 1 when it is not or cannot be checked.
Standard library only, so it runs with any Python 3 the agent has.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def _token():
    for name in ("REXMLE_GATEWAY_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="rexmle validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", help="must be $REXMLE_SUBMISSION_DIR (the only folder the gateway checks)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the verdict")
    parser.add_argument("--json", action="store_true", help="print the gateway's whole JSON verdict")
    args, _unknown = parser.parse_known_args(argv)  # `rexmle validate --task/--data` of old scripts still work
    url, token = os.environ.get("REXMLE_VALIDATE_URL"), _token()
    if not url or not token:
        print("INVALID: cannot validate: REXMLE_VALIDATE_URL and this run's token are not set "
              "(run inside a ReX-MLE run)", file=sys.stderr)
        return 1
    expected = os.environ.get("REXMLE_SUBMISSION_DIR")
    if args.submission and expected and os.path.realpath(args.submission) != os.path.realpath(expected):
        print(f"INVALID: the gateway validates only the run's submission folder {expected}; "
              f"put your files there (asked for {args.submission})")
        return 1
    request = urllib.request.Request(url, data=b"{}", method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the gateway is reached directly
    try:
        with opener.open(request, timeout=args.timeout) as response:
            verdict = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        try:
            verdict = json.loads(exc.read().decode("utf-8"))
        except ValueError:
            verdict = {"ok": False, "problems": [f"the gateway answered HTTP {exc.code}"]}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"INVALID: cannot reach the validation endpoint: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(verdict, indent=2))
    elif verdict.get("ok"):
        cases = verdict.get("cases")
        print(f"OK: {cases} test case(s), format valid for {verdict.get('task')} (checked against public data only)")
        for warning in verdict.get("warnings") or []:
            print(f"WARNING: {warning}")
    else:
        problems = verdict.get("problems") or [verdict.get("error", {}).get("message", "no reason given")]
        print("INVALID: " + "; ".join(str(p) for p in problems))
    return 0 if verdict.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
