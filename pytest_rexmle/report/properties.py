"""The names under which the fixtures hand an item's facts to the session report (``item.user_properties``).

They live with the report, their reader: the fixtures (above it) write them, the report and the HTML table read
them back from each test report, on the controller as on xdist workers.
"""

RESULT_PROPERTY = "rexmle_result"
CAPABILITY_PROPERTY = "rexmle_capability"
STAGES_PROPERTY = "rexmle_stages"
TASK_PROPERTY = "rexmle_task"
AGENT_PROPERTY = "rexmle_agent"
#: the item's repeat (``--rexmle-repeat`` > 1): the session report keeps each run and aggregates per task
REPEAT_PROPERTY = "repeat"
#: the run's compute record and what it reached (run.json's ``compute``, ``network``, ``egress``), for the report
RUN_PROPERTY = "rexmle_run"
