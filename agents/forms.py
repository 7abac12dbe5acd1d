"""Agent form: input validation only; the services enforce uniqueness and the rest."""

from django import forms

from agents.cli_fields import MODEL_MAX_LENGTH, NAME_MAX_LENGTH, masked_env
from agents.models import CustomOutput
from runner.clis import AGENT_CLI_CHOICES, CliType


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


class AgentForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=NAME_MAX_LENGTH,
        error_messages={"required": "Name is required"},
        widget=forms.TextInput(attrs={"autocomplete": "off", "placeholder": "e.g. Reviewer"}),
    )
    instruction = forms.CharField(
        label="Instruction",
        error_messages={"required": "Instruction is required"},
        help_text="The agent's role: what to focus on; when to skip, comment or ask for review.",
        widget=forms.Textarea(attrs={"rows": 8}),
    )
    cli_type = forms.ChoiceField(label="CLI", choices=AGENT_CLI_CHOICES)
    fallback_cli_type = forms.ChoiceField(
        label="Fallback CLI",
        choices=[("", "None: wait for its quota"), *CliType.choices],
        required=False,
        help_text="Runs this agent while its CLI is out of quota (usage limit).",
    )
    model = forms.CharField(
        label="Model",
        required=False,
        max_length=MODEL_MAX_LENGTH,
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "CLI default"}
        ),
    )
    reasoning_effort = forms.CharField(label="Reasoning effort", required=False)
    extra_args = forms.CharField(
        label="Extra arguments",
        required=False,
        help_text="One argument per line, passed as is (no shell, no quotes needed).",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )
    custom_binary = forms.CharField(
        label="Binary",
        required=False,
        help_text="A command on the PATH or an absolute path.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": "e.g. aider"}),
    )
    custom_args = forms.CharField(
        label="Argument template",
        required=False,
        help_text=(
            "Shell-style quoting, run without a shell. Placeholders: {prompt} {input_file} "
            "{output_file} {cwd} {temp_dir} {model} (an argument with {model} is left out "
            "when no model is set)."
        ),
        widget=forms.TextInput(
            attrs={"spellcheck": "false", "placeholder": "--message {prompt} --yes-always"}
        ),
    )
    custom_env = forms.CharField(
        label="Environment variables",
        required=False,
        help_text="NAME=value, one per line. Saved values show masked; leave them as they are.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )
    custom_output = forms.ChoiceField(
        label="Its answer", choices=CustomOutput.choices, initial=CustomOutput.FILE, required=False
    )

    def clean_extra_args(self) -> list[str]:
        return _lines(self.cleaned_data.get("extra_args"))

    def clean_custom_env(self) -> dict[str, str]:
        env = {}
        for line in _lines(self.cleaned_data.get("custom_env")):
            name, sep, value = line.partition("=")
            if not sep or not name.strip():
                raise forms.ValidationError(f"Write each variable as NAME=value: {line!r}")
            env[name.strip()] = value
        return env

    def clean_custom_output(self) -> str:
        return self.cleaned_data.get("custom_output") or CustomOutput.FILE

    @staticmethod
    def initial_for(agent) -> dict:
        """The dialog's values for an existing agent."""
        return {
            "name": agent.name,
            "instruction": agent.instruction,
            "cli_type": agent.cli_type,
            "fallback_cli_type": agent.fallback_cli_type,
            "model": agent.model,
            "reasoning_effort": agent.reasoning_effort,
            "extra_args": "\n".join(agent.extra_args or []),
            "custom_binary": agent.custom_binary,
            "custom_args": agent.custom_args,
            "custom_env": "\n".join(f"{k}={v}" for k, v in masked_env(agent.custom_env).items()),
            "custom_output": agent.custom_output,
        }
