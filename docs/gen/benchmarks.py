"""The benchmarks' charts page (a stub: only its title for now)."""

import mkdocs_gen_files

with mkdocs_gen_files.open("benchmarks/charts.md", "w") as page:
    page.write("# Charts\n")
