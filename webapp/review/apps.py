from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "webapp.review"
    label = "review"
    verbose_name = "Human review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug review into arena (arena never imports review): the rule set new evaluations run
        under, the kernels listings leave out, the flags stored with each evaluation's result, and
        the reward a hack verdict or a reviewer rule replaced, and the queue's length (the demo's)."""
        from webapp.arena import hooks

        from . import selectors, services

        hooks.rule_set_provider_register(selectors.active_rule_set)
        hooks.hidden_kernels_register(selectors.hidden_kernel_ids)
        hooks.evaluation_stored_register(services.flags_from_evaluation)
        hooks.reward_review_register(selectors.REWARD_REVIEW)
        hooks.open_reviews_register(selectors.open_case_count)
