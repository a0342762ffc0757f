"""Activity names: the only thing workflows need to know about activities."""

VALIDATE_MUTATION = "validate_mutation"
RECORD_MUTATION_STATUS = "record_mutation_status"
RUN_SANDBOX_TEST = "run_sandbox_test"
ACTIVATE_TRAIT = "activate_trait"
ROLLBACK_TRAIT = "rollback_trait"
DELIVER_WEBHOOK = "deliver_webhook"
PUBLISH_TASK = "publish_task"
CLOSE_TASK = "close_task"

# GEPA optimisation steps (activities/gepa.py), on the GEPA task queue.
GEPA_CLONE_REPOSITORY = "gepa_clone_repository"
GEPA_RECORD_CLIENT = "gepa_record_client"
GEPA_START_PROGRAM = "gepa_start_program"
GEPA_MUTATE = "gepa_mutate"
GEPA_RUN_PROGRAM = "gepa_run_program"
GEPA_FINISH_PROGRAM = "gepa_finish_program"
