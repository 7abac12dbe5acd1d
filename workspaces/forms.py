"""Workspace forms: input validation only; the services enforce the rules."""

from django import forms

from core.forms import MinutesField
from workspaces.checks import ATTEMPTS_DEFAULT
from workspaces.models import (
    PARALLEL_TASKS_MAX,
    RETENTION_DAYS_MAX,
    STALL_KILL_MINUTES_MAX,
    Isolation,
    NotifySetting,
    WorkingDirectoryMode,
    Workspace,
)
from workspaces.selectors import notify_choices
from workspaces.services import BASE_BRANCH_MAX_LENGTH, TITLE_MAX_LENGTH

REQUIRED_TITLE = {"required": "Title is required"}
BLANK_CHECK_ROWS = 2  # empty rows under the checks, to add some (a row left empty is none)


class ChecksInput(forms.Widget):
    """The checks as rows of three inputs (check_name, check_command, check_timeout), rendered
    by the settings template; a row left empty is dropped."""

    def value_from_datadict(self, data, files, name):
        names, commands = data.getlist("check_name"), data.getlist("check_command")
        timeouts = data.getlist("check_timeout")
        rows = []
        for index, command in enumerate(commands):
            name_ = names[index].strip() if index < len(names) else ""
            timeout = timeouts[index].strip() if index < len(timeouts) else ""
            if not (command.strip() or name_ or timeout):
                continue
            rows.append({"name": name_, "command": command, "timeout_minutes": _minutes(timeout)})
        return rows


def _minutes(text: str):
    """A number when it reads as one ("" → the default); else the text, which the service
    refuses with its message."""
    if not text:
        return None
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


class ChecksField(forms.Field):
    """Rows of checks, checked by the service (workspaces.checks), which names a bad row."""

    widget = ChecksInput

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def to_python(self, value):
        return list(value or [])


SWITCH = forms.CheckboxInput(attrs={"role": "switch"})


class WorkspaceCreateForm(forms.Form):
    title = forms.CharField(
        label="Title",
        max_length=TITLE_MAX_LENGTH,
        error_messages=REQUIRED_TITLE,
        widget=forms.TextInput(attrs={"autocomplete": "off", "placeholder": "e.g. Website"}),
    )
    description = forms.CharField(
        label="Instruction",
        required=False,
        help_text="Context every agent receives: the goal, the repositories, the conventions.",
        widget=forms.Textarea(attrs={"rows": 4}),
    )


class WorkspaceSettingsForm(forms.Form):
    title = forms.CharField(
        label="Title", max_length=TITLE_MAX_LENGTH, error_messages=REQUIRED_TITLE
    )
    description = forms.CharField(
        label="Instruction",
        required=False,
        help_text="Context every agent receives: the goal, the repositories, the conventions.",
        widget=forms.Textarea(attrs={"rows": 6}),
    )
    working_directory_mode = forms.ChoiceField(
        label="Working directory",
        # The default (temp) first.
        choices=sorted(WorkingDirectoryMode.choices, key=lambda c: c[0] != "temp"),
        widget=forms.RadioSelect,
    )
    working_directory_path = forms.CharField(
        label="Directory path",
        required=False,
        help_text="Every agent works in this folder, for every task.",
        widget=forms.TextInput(
            attrs={
                "placeholder": "/home/me/projects/website",
                "spellcheck": "false",
                "autocomplete": "off",
                # Django keeps a widget's own aria-describedby: list the hint, error and warning.
                "aria-describedby": (
                    "id_working_directory_path_helptext id_working_directory_path_error "
                    "path-warning-text"
                ),
            }
        ),
    )
    isolation = forms.ChoiceField(
        label="Isolation",
        choices=Isolation.choices,
        required=False,  # not sent: none
        help_text=(
            "Branch per task: each task works in a git worktree of its own, on a branch "
            "malamar/…, and your checkout is left alone until you merge. Needs a git repository."
        ),
    )
    base_branch = forms.CharField(
        label="Base branch",
        required=False,
        max_length=BASE_BRANCH_MAX_LENGTH,
        help_text="Task branches start from it and merge into it. Empty: the current branch.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    setup_command = forms.CharField(
        label="Setup command",
        required=False,
        help_text="Run once in each new worktree, without a shell (e.g. npm ci).",
        widget=forms.TextInput(
            attrs={"placeholder": "npm ci", "spellcheck": "false", "autocomplete": "off"}
        ),
    )
    parallel_tasks = forms.IntegerField(
        label="Parallel tasks",
        required=False,  # not sent: 1
        min_value=1,
        max_value=PARALLEL_TASKS_MAX,
        help_text="Tasks that run at once. More than 1 needs branch per task.",
        error_messages={
            "required": "Enter a number of tasks (1 or more)",
            "invalid": "Enter a whole number",
            "min_value": "Enter 1 or more",
            "max_value": f"Enter at most {PARALLEL_TASKS_MAX}",
        },
        widget=forms.NumberInput(attrs={"min": 1, "inputmode": "numeric"}),
    )
    keep_merged_branches = forms.BooleanField(
        label="Keep merged branches",
        required=False,
        help_text="Once a task's branch is merged its worktree is removed; its branch too, "
        "unless this is on.",
        widget=SWITCH,
    )
    auto_delete_done_tasks = forms.BooleanField(
        label="Delete done tasks automatically",
        required=False,
        help_text="Off: Done tasks stay until you delete them. On: those older than the "
        "retention period are removed once a day (not those finished without merging).",
        widget=SWITCH,
    )
    retention_days = forms.IntegerField(
        label="Keep done tasks for (days)",
        min_value=0,
        max_value=RETENTION_DAYS_MAX,
        help_text="0 keeps them until you delete them.",
        error_messages={
            "required": "Enter a number of days (0 or more)",
            "invalid": "Enter a whole number of days",
            "min_value": "Enter 0 or more days",
            "max_value": f"Enter at most {RETENTION_DAYS_MAX} days",
        },
        widget=forms.NumberInput(attrs={"min": 0, "inputmode": "numeric"}),
    )
    stall_kill_minutes = MinutesField(
        label="Stop a silent run after (minutes)",
        min_value=0,
        max_value=STALL_KILL_MINUTES_MAX,
        help_text=(
            "A run that prints nothing for this long is stopped and reported as an error. "
            "0 never stops it (you still get a warning)."
        ),
        error_messages={
            "required": "Enter a number of minutes (0 or more)",
            "invalid": "Enter a number of minutes",
            "min_value": "Enter 0 or more minutes",
            "max_value": f"Enter at most {STALL_KILL_MINUTES_MAX} minutes",
        },
        widget=forms.NumberInput(attrs={"min": 0, "step": "any", "inputmode": "decimal"}),
    )
    mcp_tools_enabled = forms.BooleanField(
        label="Give agents Malamar's tools",
        required=False,
        help_text=(
            "Runs get Malamar's MCP server: agents can search this workspace's tasks, read "
            "them, find related ones, create tasks and comment."
        ),
        widget=SWITCH,
    )
    checks = ChecksField(
        label="Checks",
        help_text=(
            "Run in order in the task's folder (or worktree) before it may go In Review, "
            "without a shell (no pipes, no &&). A failure goes back to the agents."
        ),
    )
    checks_attempts = forms.IntegerField(
        label="Attempts before asking me",
        required=False,  # not sent: the default
        min_value=1,
        max_value=20,
        help_text=(
            "Failed rounds of checks in a row before the task goes In Review anyway, marked "
            "“Checks failing”."
        ),
        error_messages={
            "required": "Enter a number of attempts (1 or more)",
            "invalid": "Enter a whole number",
            "min_value": "Enter 1 or more",
            "max_value": "Enter at most 20",
        },
        widget=forms.NumberInput(attrs={"min": 1, "max": 20, "inputmode": "numeric"}),
    )
    notify_on_error = forms.ChoiceField(
        label="When an error occurs",
        choices=NotifySetting.choices,
        help_text="A CLI fails, times out or returns malformed output.",
    )
    notify_on_in_review = forms.ChoiceField(
        label="When a task moves to In Review",
        choices=NotifySetting.choices,
        help_text="The agents finished or need your input.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "Inherit (currently on)": which value is in effect with the global settings of now.
        for key, choices in notify_choices().items():
            self.fields[key].choices = choices

    def clean_isolation(self):
        return self.cleaned_data["isolation"] or Isolation.NONE

    def clean_checks_attempts(self):
        value = self.cleaned_data["checks_attempts"]
        return ATTEMPTS_DEFAULT if value is None else value

    def clean_parallel_tasks(self):
        value = self.cleaned_data["parallel_tasks"]
        return 1 if value is None else value

    def check_rows(self) -> list[dict]:
        """The checks as the person wrote them (or as saved), and blank rows to add more."""
        rows = list(self["checks"].value() or [])
        return rows + [{"name": "", "command": "", "timeout_minutes": None}] * BLANK_CHECK_ROWS

    @classmethod
    def for_workspace(cls, workspace: Workspace) -> "WorkspaceSettingsForm":
        return cls(initial={name: getattr(workspace, name) for name in cls.base_fields})


class WorkspaceDeleteForm(forms.Form):
    confirm_title = forms.CharField(
        label="Type the workspace name to confirm",
        error_messages={"required": "Type the workspace name to confirm"},
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, *args, workspace: Workspace, **kwargs):
        super().__init__(*args, **kwargs)
        self.workspace = workspace

    def clean_confirm_title(self):
        value = self.cleaned_data["confirm_title"]
        if value.strip() != self.workspace.title:
            raise forms.ValidationError("The name does not match")
        return value
