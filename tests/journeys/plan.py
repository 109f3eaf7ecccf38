"""What the journeys suite does with each command the documentation shows — README.md, then the pages of
``docs/`` in mkdocs.yml's ``nav`` order (``readme_commands.guide_commands``) — in that order: run it (as
written, or with the placeholders a reader fills in, the files the guide assumes they have, and the narrowing
the guide itself suggests for a first try), or not, with the reason. ``test_readme.py`` fails when the
documentation's commands and this list part ways, so a new, changed or removed command needs a line here."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """A documented command the journey runs, in a fresh clone with its ``.venv`` active (``. .venv/bin/activate``)."""

    readme: str                                    # the command as the page shows it (readme_commands' text)
    subs: tuple[tuple[str, str], ...] = ()         # a placeholder or shared path -> what the journey types
    extra: str = ""                                # arguments added (the README's own "first short try")
    setup: str = ""                                # shell run first: files the README takes for granted
    expect: tuple[str, ...] = ()                   # regular expressions its output must match
    docker: bool = False                           # needs the engine (and the images the real run builds)
    why: str = ""                                  # why it is run other than exactly as written

    def command(self) -> str:
        text = self.readme
        for old, new in self.subs:
            assert old in text, (old, text)
            text = text.replace(old, new)
        return f"{text} {self.extra}".strip()


@dataclass(frozen=True)
class NotRun:
    """A documented command the journey does not run, and why not."""

    readme: str
    reason: str


FIRST_RUN = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && pytest --agent=sample --rexmle-data=synthetic"
#: the user's own agent of the everyday line: copies the sample submission, as a first agent would
MY_AGENT = "import os, shutil\nshutil.copy(os.path.join(os.environ['REXMLE_DATA_DIR'], 'sample_submission.csv'), " \
           "os.path.join(os.environ['REXMLE_SUBMISSION_DIR'], 'submission.csv'))\n"
FAST_TRY = "-k ldct-iqa --rexmle-time-limit=300"
TESTS_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' -c constraints.txt && pytest -n 2"
#: the guide's toy competition: run as written by its own test, in a copy of the checkout, since it adds a
#: 21st task that the journey's later sessions would then count
TOY_GUIDE = ("tests/test_toy_competition.py runs the guide's toy commands as written in a copy of the checkout "
             "(here the toy would be a 21st task in the journey's clone)")
SHOWN_AGAIN = "the README's set-up command, shown again on this page for readers of the site: run once, above"

JOURNEY: list[Run | NotRun] = [
    # -- README.md: the two set-up commands, one real run
    Run(FIRST_RUN, expect=(r"ReX-MLE score: [\d.]+% over 20 task\(s\), 0 FAIL",)),
    NotRun(TESTS_COMMAND, "the project's own test suite, which holds this journey: .ci/run runs it"),
    NotRun("pytest --agent=ml-master -k topcow",
           "ML-Master with a real model on the six prepared TopCoW tasks: tests/test_headline.py runs this command "
           "as typed (its messages without an engine, image or data), and ML-Master runs end to end in "
           "tests/docker/test_ml_master_e2e.py on the synthetic ldct-iqa"),
    # -- docs/getting-started.md
    NotRun(FIRST_RUN, SHOWN_AGAIN),
    # -- Everyday use
    Run("pytest --agent=sample --rexmle-data=synthetic -k topcow", expect=(r"over 6 task\(s\), 0 FAIL",)),
    Run('pytest --agent=sample --rexmle-data=synthetic -m "cta and detection"', expect=(r"0 FAIL",)),
    Run("pytest --agent=sample --rexmle-data=synthetic -n 4 --junitxml=out.xml",
        expect=(r"over 20 task\(s\), 0 FAIL",)),
    Run('pytest --agent=command --agent-option cmd="python my_agent.py" --agent-option dir=path/to/agent '
        '--rexmle-data=synthetic --rexmle-time-limit=600 -k ldct-iqa',
        setup=f"mkdir -p path/to/agent && printf %s {shlex.quote(MY_AGENT)} > path/to/agent/my_agent.py",
        expect=(r"ldct-iqa\s+ok",)),
    Run("rexmle list", expect=(r"topcow-cta-det", r"usenhance")),
    Run("rexmle info topcow-cta-det", expect=(r"iou",)),
    Run("""rexmle rank topcow-cta-det --metrics '{"iou": 0.6707, "boundary_iou": 0.611}' --json""",
        expect=(r'"percentile"',)),
    Run("rexmle synth isles22 --out .rexmle/twins/isles22"),
    Run("rexmle grade isles22 --submission sub/ --answers .rexmle/twins/isles22/private --json",
        setup="cp -r \"$(ls -d .rexmle/runs/isles22/sample-*/*/submission | tail -1)\" sub",
        expect=(r'"status": "ok"',), why="sub/ is the first run's isles22 submission (the README: any run folder has one)"),
    Run("rexmle prepare isles22", expect=(r"isles22",), why="Zenodo answered by a loopback server"),
    Run("rexmle prepare usenhance --raw-archive ~/Downloads/train_dataset.zip",
        why="the archive a reader downloads by hand: a stand-in in ~/Downloads"),
    NotRun("pytest --agent=ml-master --rexmle-runtime=docker --rexmle-gpus=0,1,2,3 -n 4 --agent-option model=gpt-4o",
           "four GPUs and all 20 challenges prepared for a real model: ML-Master runs end to end in "
           "tests/docker/test_ml_master_e2e.py on the synthetic ldct-iqa"),
    Run("rexmle images build --agent aide", docker=True, expect=(r"rexmle/aide:latest",)),
    NotRun("rexmle images export --agent aide aide.tar",
           "tests/images exports the real aide and claude-code images this way and runs them from the cache on the "
           "local and Slurm runtimes with Docker hidden; a second 8 GB export here would only repeat it"),
    NotRun("rexmle images import --tag rexmle/aide:latest aide.tar",
           "tests/images imports the exported images (see the export line)"),
    Run("pytest --agent=sample --rexmle-data=synthetic --rexmle-repeat=3 -k ldct-iqa",
        expect=(r"ldct-iqa: mean", r"3 runs, 3 repeats each")),
    Run("rexmle report .rexmle/report run2/.rexmle/report --out merged/",
        setup="mkdir -p run2 && (cd run2 && pytest -q --agent=sample --rexmle-data=synthetic -k ldct-iqa >/dev/null)",
        expect=(r"merged",), why="run2/ is a second session, run first"),
    Run("rexmle status", expect=(r"ldct-iqa",)),
    Run("rexmle selfcheck --runtime local --sandbox bwrap", expect=(r"PASS",)),
    # -- The project's own tests
    NotRun(TESTS_COMMAND, SHOWN_AGAIN),
    # -- docs/real-data.md: 2. the data
    Run("rexmle prepare usenhance --raw-archive ~/Downloads/train_dataset.zip"),
    Run("rexmle prepare ldct-iqa --raw-archive ~/Downloads/test_dataset.zip",
        why="Zenodo answered by a loopback server, the test set a stand-in in ~/Downloads"),
    Run("rexmle prepare TASK --check --raw-archive FILE ...",
        subs=(("TASK", "ldct-iqa"), ("FILE ...", "~/Downloads/test_dataset.zip")), why="placeholders filled in"),
    # -- 3. the images (Docker Hub answered by the loopback registry mirror of .ci/registry-mirror.sh)
    Run("docker pull pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", docker=True),
    Run("rexmle images build --agent base", docker=True, expect=(r"rexmle/base:latest",)),
    Run("rexmle images build --agent aide", docker=True, expect=(r"rexmle/aide:latest",)),
    # -- 5. the run: AIDE against a stand-in OpenAI provider given as the host's OPENAI_BASE_URL
    Run("pytest --agent=aide --junitxml=aide.xml", docker=True,
        extra=f"{FAST_TRY} --agent-option=model=scripted-model --agent-option=steps=1",
        expect=(r"ldct-iqa\s+ok",),
        why="the README's first short try (-k, --rexmle-time-limit) on the prepared ldct-iqa, one AIDE step"),
    Run("rexmle status", expect=(r"ldct-iqa +aide +ok",), docker=True, why="shows the AIDE run of step 5"),
    # -- docs/agents.md: How does Claude Code do on ReX-MLE?
    Run("rexmle images build --agent claude-code", docker=True, expect=(r"rexmle/claude-code:latest",)),
    NotRun("export ANTHROPIC_API_KEY=...", "the reader's own key: the journey's provider is a stand-in"),
    NotRun("pytest --agent=claude-code --agent-option=model=claude-sonnet-4-5 --rexmle-runtime=docker -n auto "
           "--junitxml=claude-code.xml", "all 20 challenges for 24 h each with a real model"),
    NotRun("pytest --agent=claude-code --agent-option=model=claude-sonnet-4-5 --rexmle-runtime=docker "
           "--rexmle-time-limit=3600 -k isles22",
           "a model that segments ISLES'22: tests/docker/test_coding_cli_e2e.py runs Claude Code end to end against "
           "a stand-in Anthropic provider on ldct-iqa"),
    NotRun("pytest --agent=claude-code --agent=codex --agent=aide --rexmle-runtime=docker -n auto "
           "--agent-option=claude-code:model=claude-sonnet-4-5 --agent-option=codex:model=gpt-5 "
           "--agent-option=aide:model=gpt-5",
           "all 20 challenges for three agents with real models: tests/docker/test_coding_cli_e2e.py runs two CLI "
           "agents in one session"),
    NotRun('for model in gpt-5 gemini-3-pro-preview claude-sonnet-4-5; do pytest --agent=aide --agent=ml-master '
           '--rexmle-runtime=docker -n auto -k "isles22 or dentex or topcow-cta-cls or ldct-iqa" '
           '--agent-option=model=$model --agent-option=ml-master:feedback_model=$model --junitxml=table5-$model.xml done',
           "the paper's ablation: 24 h runs with three real models"),
    # -- docs/own-agent.md: the example agent with its own stack (a venv of the reader's, or an image)
    Run("python3 -m venv agent-env && agent-env/bin/pip install numpy tifffile"),
    Run('pytest --agent=command --agent-option cmd="python my_agent.py" --agent-option dir=examples '
        '--agent-option env=$PWD/agent-env -k ldct-iqa --rexmle-data=synthetic', expect=(r"ldct-iqa\s+ok",)),
    Run('pytest --agent=command --agent-option cmd="python3 my_agent.py" --agent-option dir=examples '
        '--agent-option image=rexmle/base -k ldct-iqa --rexmle-data=synthetic', docker=True,
        expect=(r"ldct-iqa\s+ok",)),
    # -- docs/clusters.md
    NotRun('pytest --agent=codex --rexmle-repeat=3 --rexmle-gpus=0,1,2,3 -k "isles22 or topcow"',
           "Codex with a real model on four GPUs: tests/schedule/test_repeats.py runs repeats end to end with a "
           "command agent, tests/report/test_repeats.py checks their numbers"),
    NotRun("pytest --agent=aide --rexmle-runtime=slurm --rexmle-slurm-partition=gpu --rexmle-slurm-account=lab "
           "--rexmle-slurm-option mem=64G --rexmle-slurm-option constraint=a100",
           "a site's partition, account and A100s: tests/slurm runs the Slurm runtime on the one-node cluster"),
    # -- docs/extending/competition.md: the toy competition added as one folder
    *(NotRun(command, TOY_GUIDE) for command in (
        "cp -r examples/competitions/toy pytest_rexmle/competitions/toy",
        "rexmle list",
        "rexmle info toy-fundus-cls",
        "WORK=$(mktemp -d)",
        "rexmle synth toy-fundus-cls --out $WORK/twin --seed 7",
        "mkdir $WORK/perfect $WORK/baseline",
        "cp $WORK/twin/private/answers.csv $WORK/perfect/submission.csv",
        "cp $WORK/twin/public/sample_submission.csv $WORK/baseline/submission.csv",
        "rexmle grade toy-fundus-cls --submission $WORK/perfect --answers $WORK/twin/private",
        "rexmle grade toy-fundus-cls --submission $WORK/baseline --answers $WORK/twin/private",
        "(cd $WORK && pytest --agent=sample --rexmle-data=synthetic -m fundus --strict-markers)",
        "mkdir -p $WORK/release && cp -r $WORK/twin/public/train/images $WORK/release/",
        "cp $WORK/twin/public/train_labels.csv $WORK/release/labels.csv",
        "python -m zipfile -c $WORK/ToyFundus.zip $WORK/release/",
        "rexmle prepare toy-fundus-cls --raw-archive $WORK/ToyFundus.zip --data-dir $WORK/data",
    )),
]
