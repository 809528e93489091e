"""Every printed report, one module per report, on one text layer (:mod:`.text`)."""
