from autorl.cli import app

app(prog_name="autorl")
