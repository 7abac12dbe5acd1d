from django.apps import AppConfig


class RunnerConfig(AppConfig):
    name = "runner"
