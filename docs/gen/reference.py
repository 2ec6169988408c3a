"""The generated reference pages (a stub: each page is only its title for now)."""

import mkdocs_gen_files

PAGES = {
    "reference/configuration.md": "Configuration",
    "reference/consumergroup-crd.md": "The ConsumerGroup resource",
    "reference/metrics.md": "Metrics",
    "reference/cli.md": "Command line",
    "reference/alerts.md": "Alerts",
}

for path, title in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(f"# {title}\n")
