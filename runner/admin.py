from django.contrib import admin

from runner.models import CliHealth


@admin.register(CliHealth)
class CliHealthAdmin(admin.ModelAdmin):
    list_display = ("cli_type", "status", "version", "binary_path", "checked_at")
    list_filter = ("status",)
