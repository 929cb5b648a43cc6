"""``trinity studio``: a local web page that writes and checks experiment configs.

The form is generated in the browser from the config's JSON Schema (``trinity config schema``);
every edit is validated by the same pass as ``trinity config check`` (``trinity.config.check_tree``).
"""
