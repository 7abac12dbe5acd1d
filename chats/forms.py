"""Chat page forms (validation only; the services hold the rules)."""

from django import forms

from chats.services import TITLE_MAX_LENGTH
from runner.clis import CliType


class ChatTitleForm(forms.Form):
    title = forms.CharField(
        label="Chat title",
        max_length=TITLE_MAX_LENGTH,
        error_messages={"required": "Title is required"},
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


class ChatMessageForm(forms.Form):
    message = forms.CharField(
        label="Message",
        error_messages={"required": "Write a message first"},
        widget=forms.Textarea(attrs={"rows": 1}),
    )


class ChatStartForm(forms.Form):
    """A new chat: `agent_id` empty = the Malamar agent; `message` optional (the first one)."""

    agent_id = forms.CharField(required=False)
    message = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 1}))


class AgentChoiceForm(forms.Form):
    """An agent of the workspace; empty = the Malamar agent (the service checks the id)."""

    agent_id = forms.CharField(required=False)


class CliChoiceForm(forms.Form):
    """A CLI override; empty = none (the agent's CLI, or Malamar's first available one)."""

    cli_type = forms.ChoiceField(
        required=False,
        choices=[("", "Default"), *CliType.choices],
        error_messages={"invalid_choice": "Choose one of the listed CLIs"},
    )

    def clean_cli_type(self) -> str | None:
        return self.cleaned_data["cli_type"] or None


class IncludedForm(forms.Form):
    """A checkbox: absent from the post = unchecked."""

    included = forms.BooleanField(required=False)
