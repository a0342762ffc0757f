"""Activity names: the only thing workflows need to know about activities."""

VALIDATE_MUTATION = "validate_mutation"
RECORD_MUTATION_STATUS = "record_mutation_status"
RUN_SANDBOX_TEST = "run_sandbox_test"
ACTIVATE_TRAIT = "activate_trait"
ROLLBACK_TRAIT = "rollback_trait"
DELIVER_WEBHOOK = "deliver_webhook"
