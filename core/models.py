from django.db import models


class Setting(models.Model):
    """Global settings, one JSON value per key (spec: `settings(key, value)`)."""

    key = models.CharField(primary_key=True, max_length=100)
    value = models.JSONField(null=True)

    class Meta:
        db_table = "settings"

    def __str__(self) -> str:
        return self.key


class OutboxEvent(models.Model):
    """An event written in the same transaction as the change it describes.

    The server's relay thread forwards rows in id order to the SSE stream, so an event exists
    exactly when its change was committed, whichever process made it.
    """

    id = models.BigAutoField(primary_key=True)
    type = models.CharField(max_length=64)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "event_outbox"

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class Marker(models.Model):
    """Once-only facts (e.g. "the sample workspace was seeded"), guarded by the primary key."""

    name = models.CharField(primary_key=True, max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "markers"

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A bearer token for API clients when a password is set. Only its hash is stored."""

    id = models.CharField(primary_key=True, max_length=21)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
