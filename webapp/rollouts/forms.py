"""The launch form (pages and admin): parsing only; the services validate and create."""

from __future__ import annotations

from django import forms

from webapp.arena.models import Evaluation, Task
from webapp.core.text import NAME_MAX, form_text_validators

from .models import LlmEndpoint


def _suite_choices() -> list[tuple[str, str]]:
    suites = Task.objects.order_by("suite").values_list("suite", flat=True).distinct()
    return [("", "— one task —")] + [(s, s) for s in suites]


class RolloutLaunchForm(forms.Form):
    task = forms.ModelChoiceField(
        queryset=Task.objects.order_by("suite", "level", "name", "id"),
        required=False,
        empty_label="— choose a task —",
    )
    suite = forms.ChoiceField(required=False, help_text="Or launch one rollout per task of a whole suite.")
    submitter = forms.CharField(
        max_length=NAME_MAX,
        validators=form_text_validators(NAME_MAX),
        help_text="The model or agent being run (a new name becomes yours; an existing one must be yours "
        "or one you are a member of); its best kernels enter the leaderboard under this name.",
    )
    endpoint = forms.ModelChoiceField(
        queryset=LlmEndpoint.objects.filter(enabled=True).order_by("-builtin", "name"),
        to_field_name="name",
        label="LLM endpoint",
        empty_label=None,
        help_text="An OpenAI-compatible API registered by staff (admin → LLM endpoints); "
        "'builtin-scripted' is the app's own scripted policy (no model, no key).",
    )
    max_turns = forms.IntegerField(min_value=1, max_value=1000, initial=200)
    track = forms.ChoiceField(choices=Evaluation.Track.choices, initial=Evaluation.Track.STRICT)
    device = forms.ChoiceField(choices=[("cpu", "cpu"), ("cuda", "cuda")])
    contrastive = forms.BooleanField(
        required=False,
        help_text="CUDA-L1: show earlier kernels of the task and their speedups in the prompt.",
    )

    def __init__(self, *args, **kwargs) -> None:
        from django.conf import settings

        super().__init__(*args, **kwargs)
        self.fields["suite"].choices = _suite_choices()
        self.fields["device"].initial = settings.EVAL_DEVICE

    def clean(self) -> dict:
        data = super().clean()
        if bool(data.get("task")) == bool(data.get("suite")):
            raise forms.ValidationError("Choose one task, or a whole suite (not both).")
        return data

    def launch_settings(self) -> dict:
        data = self.cleaned_data
        return {
            "max_turns": data["max_turns"],
            "track": data["track"],
            "device": data["device"],
            "contrastive": bool(data.get("contrastive")),
        }
