"""Agent form: input validation only; the services enforce uniqueness and the rest."""

from django import forms

from agents.models import Agent, CliType
from core.fields import max_length_of


class AgentForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=max_length_of(Agent, "name"),
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
