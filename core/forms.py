"""Form helpers shared by the pages, and the global settings forms.

The settings forms only parse what the browser posts; core.settings_store validates (the same
code the JSON API uses), and the views show its errors on the fields with apply_service_error.
"""

from django import forms

from core.errors import ServiceError
from core.settings_store import HEALTH_TIMEOUT_DEFAULT, HEALTH_TIMEOUT_RANGE, MASK_PREFIX


def apply_service_error(
    form: forms.Form, error: ServiceError, field: str | None = None, prefix: str = ""
) -> None:
    """Show a service's ValidationFailed/Conflict on the field it names (or `field`), else on
    the form as a whole. An error listing several fields (`errors`) marks each of them; `prefix`
    is dropped from the names the service uses (e.g. "cli_settings.claude.binary_path")."""
    errors = getattr(error, "errors", None) or {error.field: error.message}
    for key, message in errors.items():
        name = field or (key or "").removeprefix(prefix).split(".")[0]
        form.add_error(name if name in form.fields else None, message)


class MinutesField(forms.FloatField):
    """Minutes as a person writes them: 15, not 15.0 (a fraction stays: 2.5)."""

    def prepare_value(self, value):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


class CliSettingsForm(forms.Form):
    """One CLI's binary path and environment variables.

    Variables arrive as repeated `env_name` / `env_value` inputs. Stored variables come back
    masked and their names are read-only in the page: a value equal to its mask is kept by the
    settings service, and a stored name missing from the post is deleted.
    """

    binary_path = forms.CharField(
        required=False,
        label="Binary path",
        help_text="Leave empty to find the CLI on the PATH.",
        widget=forms.TextInput(attrs={"placeholder": "Search PATH", "spellcheck": "false"}),
    )
    env = forms.Field(required=False, label="Environment variables")
    health_timeout_seconds = forms.IntegerField(
        required=False,
        min_value=HEALTH_TIMEOUT_RANGE[0],
        max_value=HEALTH_TIMEOUT_RANGE[1],
        label="Health check time limit (seconds)",
        help_text=(
            "How long the health prompt may take, from the CLI's first output. Slower only "
            "shows “slow to answer”: chats and tasks keep using the CLI."
        ),
        widget=forms.NumberInput(attrs={"placeholder": str(HEALTH_TIMEOUT_DEFAULT)}),
    )

    def __init__(self, *args, cli_type: str, stored_env: dict[str, str], **kwargs):
        super().__init__(*args, prefix=cli_type, **kwargs)
        self.cli_type = cli_type
        self.stored_env = stored_env  # masked values, as shown to the user
        if self.is_bound:
            names = self.data.getlist(self.add_prefix("env_name"))
            values = self.data.getlist(self.add_prefix("env_value"))
            self.env_rows = [
                {"name": n.strip(), "value": v, "stored": n.strip() in stored_env}
                for n, v in zip(names, values, strict=False)
                if n.strip() or v
            ]
        else:
            self.env_rows = [
                {"name": name, "value": value, "stored": True} for name, value in stored_env.items()
            ]

    def clean(self):
        """Rows → the settings service's `env` object (which validates names and values)."""
        cleaned = super().clean()
        env: dict[str, str | None] = {}
        for row in self.env_rows:
            name = row["name"]
            if name and name in env:
                self.add_error("env", f"“{name}” is listed twice.")
                break
            env[name] = row["value"]
        for name in self.stored_env:
            env.setdefault(name, None)  # removed in the page: delete it
        cleaned["change"] = {
            "binary_path": cleaned.get("binary_path", ""),
            "env": env,
            "health_timeout_seconds": cleaned.get("health_timeout_seconds"),
        }
        return cleaned

    @staticmethod
    def is_masked(value: str) -> bool:
        return value.startswith(MASK_PREFIX)


class NotificationSettingsForm(forms.Form):
    """Email (Mailgun) and webhook settings. The key comes back masked: saving the mask keeps it."""

    mailgun_api_key = forms.CharField(
        required=False,
        label="Mailgun API key",
        widget=forms.PasswordInput(render_value=True, attrs={"autocomplete": "off"}),
    )
    mailgun_domain = forms.CharField(required=False, label="Sending domain")
    mailgun_region = forms.ChoiceField(
        choices=[("us", "US (api.mailgun.net)"), ("eu", "EU (api.eu.mailgun.net)")],
        label="Region",
    )
    mailgun_from_email = forms.CharField(required=False, label="From", widget=forms.EmailInput)
    mailgun_to_email = forms.CharField(required=False, label="To", widget=forms.EmailInput)
    notify_on_error = forms.BooleanField(required=False, label="When an agent run fails")
    notify_on_in_review = forms.BooleanField(
        required=False, label="When agents move a task to In Review"
    )
    stall_warning_minutes = MinutesField(
        label="Warn when a run is silent for (minutes)",
        help_text="An agent run that prints nothing this long raises a warning on every open page.",
        error_messages={
            "required": "Enter a number of minutes",
            "invalid": "Enter a number of minutes",
        },
        widget=forms.NumberInput(attrs={"min": 0.1, "step": "any", "inputmode": "decimal"}),
    )
    webhook_urls = forms.CharField(
        required=False,
        label="Webhook URLs",
        help_text="One per line. Each gets a JSON POST (Slack, Discord, ntfy, your scripts).",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )

    @classmethod
    def from_settings(cls, values: dict) -> "NotificationSettingsForm":
        initial = {name: values.get(name) for name in cls.base_fields}
        initial["webhook_urls"] = "\n".join(values.get("webhook_urls") or [])
        return cls(initial=initial)
