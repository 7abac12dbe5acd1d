from core.auth import password_is_set


def access(request) -> dict:
    """Whether a password protects this Malamar (the header then offers "Sign out")."""
    known = getattr(request, "password_is_set", None)  # LoginRequiredMiddleware read it
    return {"auth_enabled": password_is_set() if known is None else known}
