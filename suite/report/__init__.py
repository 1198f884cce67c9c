"""The report: figures (plots/), HTML (html.py + templates/), PDF (pdf.py), and `build`, which
rebuilds all of them from a run directory's raw tables (`python -m suite report RUN_DIR`)."""
