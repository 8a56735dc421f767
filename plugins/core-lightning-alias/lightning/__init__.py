"""``lightning`` answered by core (the core-lightning-alias distribution): see core.lightning.install_alias."""

from core.lightning import install_alias

install_alias(__name__)
