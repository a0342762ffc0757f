"""Activity names: the only thing workflows need to know about activities."""

RECORD_MUTATION_STATUS = "record_mutation_status"
# the gatekeeper and dedupe with their two records (validating; then the log) in one local activity
VALIDATE_AND_RECORD_MUTATION = "validate_and_record_mutation"
RUN_SANDBOX_TEST = "run_sandbox_test"
# a check (CheckWorkflow): the gatekeeper and a read-only dedupe lookup, nothing recorded
CHECK_TRAIT_CODE = "check_trait_code"
ACTIVATE_TRAIT = "activate_trait"
ROLLBACK_TRAIT = "rollback_trait"
# selection after the verdict (activities/selection.py)
RETIRE_TRAIT = "retire_trait"
REVIVE_TRAIT = "revive_trait"
DELIVER_WEBHOOK = "deliver_webhook"
PUBLISH_TASK = "publish_task"
CLOSE_TASK = "close_task"
# Evolution cycles (activities/evolution.py)
LOAD_CYCLE_CONTEXT = "load_cycle_context"
ARCHITECT_PLAN = "architect_plan"
CODER_GENERATE = "coder_generate"
SUBMIT_PROPOSAL = "submit_proposal"
RECORD_CYCLE = "record_cycle"
PUBLISH_FEED = "publish_feed"
APPLY_WORLD_PARAMS = "apply_world_params"
REVERT_WORLD_PARAMS = "revert_world_params"

# GEPA optimisation steps (gepa_steps/activities.py), on the GEPA task queue.
GEPA_CLONE_REPOSITORY = "gepa_clone_repository"
GEPA_RECORD_CLIENT = "gepa_record_client"
GEPA_START_PROGRAM = "gepa_start_program"
GEPA_MUTATE = "gepa_mutate"
GEPA_RUN_PROGRAM = "gepa_run_program"
GEPA_FINISH_PROGRAM = "gepa_finish_program"
# The world's journal (activities/journal.py)
VERIFY_REPLAY = "verify_replay"
SIGN_AUDIT_MANIFEST = "sign_audit_manifest"
SHADOW_PROPOSAL = "shadow_proposal"
DECIDE_PROPOSAL = "decide_proposal"
APPLY_PROPOSAL = "apply_proposal"
APPROVAL_NEEDED = "approval_needed"
# a held mutation's trait in a world forked from the live one (activities/trait_shadow.py)
SHADOW_MUTATION = "shadow_mutation"
# a trait's verdict, an experiment in forks of the live world (activities/verdict_experiment.py),
# on the verdict task queue
PLAN_VERDICT = "plan_verdict"
RUN_VERDICT_REPLICATE = "run_verdict_replicate"
