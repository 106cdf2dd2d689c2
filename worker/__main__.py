from worker.cli import app

app()
