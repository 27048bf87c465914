"""What a stage sees of the runner: the stage contract, the executor it runs tasks on."""
