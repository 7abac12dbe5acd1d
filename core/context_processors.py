from core.auth import password_is_set


def access(request) -> dict:
    """Whether a password protects this Malamar (the header then offers "Sign out")."""
    return {"auth_enabled": password_is_set()}
