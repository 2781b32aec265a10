"""SMTP submission on the standard library's ``smtplib``, bounded in time and memory."""
