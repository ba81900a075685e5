#include "host-tools/sbxd/store/sqlite.hpp"

#include <sqlite3.h>

#include <utility>

namespace sbx::sqlite {

namespace {
std::string_view code_of(sqlite3* db) {
    const int code = sqlite3_extended_errcode(db);
    if (code == SQLITE_CONSTRAINT_UNIQUE || code == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return kUniqueViolation;
    }
    return (code & 0xff) == SQLITE_FULL ? kStoreFull : "store";
}
}  // namespace

Error store_error(sqlite3* db, std::string_view what) {
    if (db == nullptr) {
        return make_coded_error("store", "{}: out of memory", what);
    }
    return make_coded_error(code_of(db), "{}: {}", what, sqlite3_errmsg(db));
}

bool is_unique_violation(const Error& error) {
    return error.code == kUniqueViolation;
}

void Statement::Finalize::operator()(sqlite3_stmt* stmt) const {
    sqlite3_finalize(stmt);
}

namespace {
// SQLITE_TRANSIENT: SQLite copies the text, so a temporary may be bound.
Error bind_failure(sqlite3* db, int index) {
    return store_error(db, fmt::format("binding parameter {}", index));
}
}  // namespace

Statement& Statement::bind(int index, std::int64_t value) {
    if (sqlite3_bind_int64(stmt_.get(), index, value) != SQLITE_OK && !bind_error_) {
        bind_error_ = bind_failure(db_, index);
    }
    return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
    if (sqlite3_bind_text64(stmt_.get(), index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8) !=
            SQLITE_OK &&
        !bind_error_) {
        bind_error_ = bind_failure(db_, index);
    }
    return *this;
}

Statement& Statement::bind(int index, std::nullptr_t) {
    if (sqlite3_bind_null(stmt_.get(), index) != SQLITE_OK && !bind_error_) {
        bind_error_ = bind_failure(db_, index);
    }
    return *this;
}

Statement& Statement::bind(int index, const std::optional<std::int64_t>& value) {
    return value ? bind(index, *value) : bind(index, nullptr);
}

Statement& Statement::bind(int index, const std::optional<std::string>& text) {
    return text ? bind(index, std::string_view(*text)) : bind(index, nullptr);
}

Result<bool> Statement::step() {
    if (bind_error_) {
        return *bind_error_;
    }
    int rc = sqlite3_step(stmt_.get());
    if (rc == SQLITE_ROW) {
        return true;
    }
    if (rc == SQLITE_DONE) {
        return false;
    }
    return store_error(db_, "executing statement");
}

Result<void> Statement::run() {
    for (;;) {
        auto row = step();
        if (!row) {
            return row.error();
        }
        if (!*row) {
            return ok();
        }
    }
}

void Statement::reset() {
    sqlite3_reset(stmt_.get());
    sqlite3_clear_bindings(stmt_.get());
    bind_error_.reset();
}

bool Statement::is_null(int column) const {
    return sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL;
}

std::int64_t Statement::int64(int column) const {
    return sqlite3_column_int64(stmt_.get(), column);
}

std::string Statement::text(int column) const {
    const auto* data = sqlite3_column_text(stmt_.get(), column);
    int size = sqlite3_column_bytes(stmt_.get(), column);
    return data == nullptr ? std::string()
                           : std::string(reinterpret_cast<const char*>(data), static_cast<std::size_t>(size));
}

std::optional<std::int64_t> Statement::optional_int64(int column) const {
    if (is_null(column)) {
        return std::nullopt;
    }
    return int64(column);
}

std::optional<std::string> Statement::optional_text(int column) const {
    if (is_null(column)) {
        return std::nullopt;
    }
    return text(column);
}

void Database::Close::operator()(sqlite3* db) const {
    sqlite3_close_v2(db);
}

Result<Database> Database::open(const std::string& path) {
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(
        path.c_str(), &raw,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE, nullptr);
    Database db;
    db.db_.reset(raw);
    if (rc != SQLITE_OK) {
        return store_error(raw, fmt::format("opening database {}", path));
    }
    sqlite3_busy_timeout(raw, 5000);
    // WAL: readers never block the writer; synchronous=NORMAL in WAL mode
    // is durable across a crash of the process (the case sbxd must survive)
    // and consistent, possibly missing the last commits, after a power loss.
    for (const char* pragma :
         {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"}) {
        if (auto r = db.exec(pragma); !r) {
            return r.error().context(path);
        }
    }
    return db;
}

Result<void> Database::exec(const std::string& sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
        Error error =
            make_coded_error(code_of(db_.get()), "{}", message != nullptr ? message : "sqlite3_exec failed");
        sqlite3_free(message);
        return error;
    }
    return ok();
}

Result<Statement> Database::prepare(std::string_view sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) !=
        SQLITE_OK) {
        return store_error(db_.get(), fmt::format("preparing '{}'", sql));
    }
    return Statement(db_.get(), stmt);
}

std::int64_t Database::changes() const {
    return sqlite3_changes64(db_.get());
}

Result<Transaction> Transaction::begin(Database& db) {
    if (auto r = db.exec("BEGIN IMMEDIATE"); !r) {
        return r.error().context("beginning a transaction");
    }
    return Transaction(&db);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
    if (db_ != nullptr) {
        (void)db_->exec("ROLLBACK");
    }
}

Result<void> Transaction::commit() {
    Database* db = std::exchange(db_, nullptr);
    if (auto r = db->exec("COMMIT"); !r) {
        (void)db->exec("ROLLBACK");
        return r.error().context("committing");
    }
    return ok();
}

}  // namespace sbx::sqlite
