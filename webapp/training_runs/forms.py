"""The launch form (admin): parsing only; the service validates the config and creates the run."""

from __future__ import annotations

import json

from django import forms

from webapp.core.text import form_text_validators, json_problem

from . import selectors

CONFIG_TEXT_MAX = 200_000


def _json_object(text: str, what: str) -> dict | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise forms.ValidationError(f"{what} must be a JSON object")
    problem = json_problem(value)
    if problem:
        raise forms.ValidationError(f"{what} {problem}")
    return value


class TrainingLaunchForm(forms.Form):
    name = forms.CharField(
        max_length=128,
        required=False,
        validators=form_text_validators(128),
        help_text="Defaults to the config's name.",
    )
    recipe = forms.ChoiceField(required=False, help_text="An example config from training/configs/ …")
    config_json = forms.CharField(
        label="Or paste a config",
        required=False,
        max_length=CONFIG_TEXT_MAX,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 90}),
        help_text="… or a full RunConfig as JSON (python -m training write-configs shows the format).",
    )
    base_model = forms.CharField(
        max_length=500,
        required=False,
        validators=form_text_validators(500),
        help_text="Empty: the config's. A registered model's name; or 'tiny:tiny_llama' / "
        "'tiny:tiny_gpt2[,hidden_size=32,…]' (a small model built from a config, no download); anything "
        "else is a path or hub name (staff only).",
    )
    task_set = forms.CharField(
        max_length=500,
        required=False,
        validators=form_text_validators(500),
        help_text="Empty: the config's. A registered task set's name; or 'synthetic:N', 'suite', "
        "'suite:name1,name2' or 'jsonl:PATH' (staff only).",
    )
    overrides = forms.CharField(
        label="Hyperparameter overrides",
        required=False,
        max_length=CONFIG_TEXT_MAX,
        widget=forms.Textarea(attrs={"rows": 5, "cols": 90}),
        help_text='JSON merged into the config, e.g. {"algo": {"group_size": 4}, "optim": {"lr": 1e-5}, '
        '"stages": [{"name": "grpo", "kind": "grpo", "steps": 50}]} (lists are replaced).',
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["recipe"].choices = [("", "— paste a config below —")] + [
            (n, n) for n in selectors.training_recipe_names()
        ]

    def clean_config_json(self) -> dict | None:
        return _json_object(self.cleaned_data.get("config_json", ""), "the config")

    def clean_overrides(self) -> dict | None:
        return _json_object(self.cleaned_data.get("overrides", ""), "the overrides")

    def clean(self) -> dict:
        data = super().clean()
        if bool(data.get("recipe")) == bool(data.get("config_json")):
            raise forms.ValidationError("Choose a recipe, or paste a config (not both).")
        return data

    def launch_kwargs(self) -> dict:
        data = self.cleaned_data
        recipe = data.get("recipe") or ""
        return {
            "name": data.get("name") or "",
            "recipe": recipe,
            "config": selectors.training_recipe_config(recipe=recipe) if recipe else data["config_json"],
            "base_model": data.get("base_model") or "",
            "task_set": data.get("task_set") or "",
            "overrides": data.get("overrides") or {},
        }
