"""Task forms: input validation only; the services enforce the rules."""

from django import forms

from tasks.selectors import SEARCH_QUERY_MAX, BoardFilters
from tasks.services import SUMMARY_MAX_LENGTH

# "Waits for": a checkbox per task, which the picker (components/picker.html) lets the person
# search; without JavaScript it is a plain list of checkboxes.
PICKER = forms.CheckboxSelectMultiple(attrs={"data-picker-choice": ""})


class TaskForm(forms.Form):
    summary = forms.CharField(
        label="Summary",
        max_length=SUMMARY_MAX_LENGTH,
        strip=True,
        error_messages={"required": "Summary is required"},
        widget=forms.TextInput(
            attrs={"autocomplete": "off", "placeholder": "e.g. Add a login page"}
        ),
    )
    description = forms.CharField(
        label="Description",
        required=False,
        help_text="Markdown. What should the agents do, and how will you know it is done?",
        widget=forms.Textarea(attrs={"rows": 8}),
    )
    blocked_by = forms.MultipleChoiceField(
        label="Waits for",
        required=False,
        help_text="It stays in Todo until each of these tasks is Done.",
        widget=PICKER,
    )

    def __init__(self, *args, blocker_choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["blocked_by"].choices = blocker_choices
        if not blocker_choices:
            del self.fields["blocked_by"]  # a first task has nothing to wait for


class BlockersForm(forms.Form):
    blocked_by = forms.MultipleChoiceField(
        label="Waits for",
        required=False,
        help_text="None chosen: it does not wait.",
        widget=PICKER,
    )

    def __init__(self, *args, blocker_choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["blocked_by"].choices = blocker_choices


class BoardFilterForm(forms.Form):
    """The board's search and filters (tasks.selectors.BoardFilters)."""

    q = forms.CharField(required=False, max_length=SEARCH_QUERY_MAX, label="Search")
    agent = forms.CharField(required=False, max_length=21)
    failing = forms.BooleanField(required=False)
    changes = forms.BooleanField(required=False)
    waiting = forms.BooleanField(required=False)

    def filters(self) -> BoardFilters:
        data = self.cleaned_data
        return BoardFilters(
            query=data["q"],
            agent=data["agent"],
            failing=data["failing"],
            changes=data["changes"],
            waiting=data["waiting"],
        )


class SummaryForm(forms.Form):
    summary = forms.CharField(
        label="Summary",
        max_length=SUMMARY_MAX_LENGTH,
        error_messages={"required": "Summary is required"},
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )


class DescriptionForm(forms.Form):
    description = forms.CharField(
        label="Description",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 10}),
    )
    # The text the edit started from: a save over a change made meanwhile is refused.
    description_base = forms.CharField(required=False, strip=False, widget=forms.HiddenInput)


class CommentForm(forms.Form):
    content = forms.CharField(
        label="Comment",
        error_messages={"required": "Write a comment first"},
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Add a comment… (Markdown)"}),
    )


class LineCommentDraftForm(forms.Form):
    """A line comment drafted in the Changes tab (its box: the lines review.js picked)."""

    path = forms.CharField(strip=False)
    side = forms.CharField()
    line = forms.IntegerField(min_value=1)
    end_line = forms.IntegerField(min_value=1)
    run = forms.CharField(required=False)
    body = forms.CharField(error_messages={"required": "Write the comment first"})


class ReviewForm(forms.Form):
    """The In Review composer: a comment with the verdict of the button pressed (the line
    comments drafted in the Changes tab go too: the server keeps them). Ctrl+Enter presses no
    button: it requests changes, as a comment on an In Review task always did. `line_comments`
    (JSON) adds others, as the API's."""

    # The buttons: the three verdicts, and Approve's two answers for an unmerged branch.
    VERDICTS = {
        "request_changes": ("request_changes", None),
        "comment": ("comment", None),
        "approve": ("approve", None),
        "approve_merge": ("approve", True),
        "approve_keep": ("approve", False),
    }

    content = forms.CharField(
        label="Comment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Your review… (Markdown)"}),
    )
    verdict = forms.ChoiceField(choices=[(key, key) for key in VERDICTS], required=False)
    line_comments = forms.JSONField(required=False)

    def clean_verdict(self) -> tuple[str, bool | None]:
        return self.VERDICTS[self.cleaned_data["verdict"] or "request_changes"]


class DeleteDoneForm(forms.Form):
    confirm_title = forms.CharField(
        label="Type the workspace name to confirm",
        error_messages={"required": "Type the workspace name to confirm"},
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, *args, workspace, **kwargs):
        super().__init__(*args, **kwargs)
        self.workspace = workspace

    def clean_confirm_title(self):
        value = self.cleaned_data["confirm_title"]
        if value.strip() != self.workspace.title:
            raise forms.ValidationError("The name does not match")
        return value


class BranchDiscardForm(forms.Form):
    confirm_branch = forms.CharField(
        label="Type the branch name to confirm",
        error_messages={"required": "Type the branch name to confirm"},
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, *args, task, **kwargs):
        super().__init__(*args, **kwargs)
        self.task = task

    def clean_confirm_branch(self):
        value = self.cleaned_data["confirm_branch"]
        if value.strip() != self.task.branch_name:
            raise forms.ValidationError("The branch name does not match")
        return value
