"""The original migrations of each app, without the squashed migration that replaces them.

Django's own graph holds an app's squashed migration in place of its originals on a database
that applied all or none of them, so a test that goes back to a state between two originals (to
write rows a data migration must fix) migrates with this graph instead; and the proof that the
squashed migrations build the schema the originals built (tests/test_squashed_migrations.py)
migrates a new database through the originals with it."""

from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState


def originals_executor(connection) -> MigrationExecutor:
    """An executor whose graph holds every original migration and no squashed one. Squashed
    migrations depend on originals only (never on each other), so nothing depends on them."""
    executor = MigrationExecutor(connection)
    loader = MigrationLoader(connection, replace_migrations=False)
    for squashed, migration in loader.replacements.items():
        loader.graph.remove_replacement_node(squashed, migration.replaces)
    executor.loader = loader
    return executor


def migrate_through_originals(connection, targets=None) -> ProjectState:
    """Migrate `connection`'s database to `targets` (default: the latest originals) through
    the original migrations; the state of its models then (`.apps` for historical models)."""
    executor = originals_executor(connection)
    return executor.migrate(targets or executor.loader.graph.leaf_nodes())
