from core.errors import NotFound


def get_or_404(queryset_or_model, pk: str, label: str):
    """Fetch by primary key or raise NotFound("Task not found")."""
    manager = getattr(queryset_or_model, "objects", queryset_or_model)
    obj = manager.filter(pk=pk).first()
    if obj is None:
        raise NotFound(f"{label} not found")
    return obj
