"""The players' guides (``players.md`` and one per language), installed as
``snl_pbem.guides`` so that the site publishes them (snl_pbem.site.guides)."""
