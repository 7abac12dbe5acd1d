"""Agent form: input validation only; the services enforce uniqueness and the rest."""

from django import forms

from agents.models import CliType
from agents.services import NAME_MAX_LENGTH


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
    cli_type = forms.ChoiceField(label="CLI", choices=CliType.choices)
    fallback_cli_type = forms.ChoiceField(
        label="Fallback CLI",
        choices=[("", "None: wait for its quota"), *CliType.choices],
        required=False,
        help_text="Runs this agent while its CLI is out of quota (usage limit).",
    )
