"""``python -m loadertune`` runs the same Hydra app as the ``loadertune`` command."""

from loadertune.cli import main

if __name__ == "__main__":
    main()
