-- A work message's fields that keep the values they were published with (its type through its HITL
-- spec), as the JSON text a claim answers them with, so that a claim builds no JSON value per
-- message: written by the publish; NULL for the messages Postbox makes itself, once one of those
-- fields changes (a claim then builds them from the columns), and once the message is completed
-- (nothing claims it again, so the row it keeps until the archiver's retention is no wider).
ALTER TABLE work_messages ADD COLUMN fields_text text;
